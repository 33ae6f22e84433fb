package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// configKeys lists the dotted YAML paths of every setting in t: struct
// fields recursively; a list or map is one setting (its entries' fields are
// described with it).
func configKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		key := prefix + name
		if f.Type.Kind() == reflect.Struct && f.Type.NumField() > 0 && !hasUnmarshaler(f.Type) {
			keys = append(keys, configKeys(f.Type, key+".")...)
			continue
		}
		keys = append(keys, key)
	}
	return keys
}

// hasUnmarshaler reports whether values of t are read from one YAML
// scalar (Duration, ByteSize and the like), not as a section.
func hasUnmarshaler(t reflect.Type) bool {
	_, ok := reflect.PointerTo(t).MethodByName("UnmarshalYAML")
	return ok
}

// TestEveryKeyDocumented keeps docs/CONFIGURATION.md complete: every key
// of the config file appears there, in backquotes.
func TestEveryKeyDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/CONFIGURATION.md")
	if err != nil {
		t.Fatal(err)
	}
	keys := configKeys(reflect.TypeFor[Config](), "")
	if len(keys) < 50 {
		t.Fatalf("found only %d keys: %v", len(keys), keys)
	}
	for _, k := range keys {
		if !strings.Contains(string(doc), "`"+k+"`") {
			t.Errorf("config key %s is not in docs/CONFIGURATION.md; add a row for it", k)
		}
	}
}
