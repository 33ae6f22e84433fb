package config

import (
	"strings"
	"testing"
)

func TestLinkInputDirectoriesKey(t *testing.T) {
	if got := Default().Worker.LinkInputDirectories; got != "auto" {
		t.Errorf("default worker.link_input_directories = %q, want auto", got)
	}
	cfg := Default()
	if err := Parse([]byte("worker:\n  link_input_directories: off\n"), &cfg); err != nil || cfg.Worker.LinkInputDirectories != "off" {
		t.Fatalf("off: %q, %v", cfg.Worker.LinkInputDirectories, err)
	}
	for value, want := range map[string]string{"symlink": "not supported", "bind": "is not a mode", "\"\"": "is not a mode"} {
		cfg := Default()
		err := Parse([]byte("worker:\n  link_input_directories: "+value+"\n"), &cfg)
		if err == nil || !strings.Contains(err.Error(), "worker.link_input_directories") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one naming the key and saying %q", value, err, want)
		}
	}
}
