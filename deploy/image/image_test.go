package image

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestImageConfig builds the image from a stand-in binary, writes it as an
// OCI archive, reads it back and checks what runtimes and Kubernetes rely
// on: entrypoint, non-root numeric user, ports, volume, labels, and the
// files of the layer with their owners and modes.
func TestImageConfig(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "gantry")
	if err := os.WriteFile(bin, []byte("#!stand-in for the static binary\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	certs := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(certs, []byte("-----BEGIN CERTIFICATE-----\nstand-in\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := Build(Options{Binary: bin, CACerts: certs, Version: "v1.2.3", Revision: "0123456789abcdef0123456789abcdef01234567", Created: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "image.tar")
	if err := WriteOCIArchive(img, "gantry:v1.2.3", archive); err != nil {
		t.Fatal(err)
	}
	back, err := ReadOCIArchive(archive, filepath.Join(dir, "layout"))
	if err != nil {
		t.Fatal(err)
	}
	mt, err := back.MediaType()
	if err != nil || mt != "application/vnd.oci.image.manifest.v1+json" {
		t.Fatalf("manifest media type %q, %v; want an OCI manifest", mt, err)
	}
	cf, err := back.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !reflect.DeepEqual(c.Entrypoint, []string{"/usr/bin/gantry"}) {
		t.Errorf("entrypoint %q", c.Entrypoint)
	}
	if !reflect.DeepEqual(c.Cmd, []string{"serve", "--listen", "0.0.0.0:8980", "--http-listen", "0.0.0.0:9090", "--data-dir", "/var/lib/gantry"}) {
		t.Errorf("cmd %q", c.Cmd)
	}
	if c.User != "65532:65532" {
		t.Errorf("user %q; want the numeric non-root 65532:65532", c.User)
	}
	wantPorts := map[string]struct{}{"8980/tcp": {}, "9090/tcp": {}}
	if !reflect.DeepEqual(c.ExposedPorts, wantPorts) {
		t.Errorf("exposed ports %v; want %v", c.ExposedPorts, wantPorts)
	}
	if !reflect.DeepEqual(c.Volumes, map[string]struct{}{"/var/lib/gantry": {}}) {
		t.Errorf("volumes %v", c.Volumes)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  "v1.2.3",
		"org.opencontainers.image.revision": "0123456789abcdef0123456789abcdef01234567",
		"org.opencontainers.image.source":   "https://github.com/gantry-build/gantry",
	} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s = %q; want %q", k, got, want)
		}
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}

	layers, err := back.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v; want 1 on an empty base", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	contents := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(h.Name, "/")] = h
		b, _ := io.ReadAll(tr)
		contents[strings.TrimSuffix(h.Name, "/")] = string(b)
	}
	check := func(name string, mode int64, uid int) {
		t.Helper()
		h := files[name]
		if h == nil {
			t.Errorf("layer lacks %s", name)
			return
		}
		if h.Mode != mode || h.Uid != uid {
			t.Errorf("%s: mode %o uid %d; want %o, %d", name, h.Mode, h.Uid, mode, uid)
		}
	}
	check("usr/bin/gantry", 0o755, 0)
	check("var/lib/gantry", 0o750, 65532)
	check("tmp", 0o1777, 0)
	check("etc/passwd", 0o644, 0)
	check("etc/ssl/certs/ca-certificates.crt", 0o644, 0)
	if !strings.Contains(contents["etc/passwd"], "\ngantry:x:65532:65532:") {
		t.Errorf("/etc/passwd lacks the gantry user:\n%s", contents["etc/passwd"])
	}
	if contents["usr/bin/gantry"] != "#!stand-in for the static binary\n" {
		t.Errorf("the binary in the layer is not the one given")
	}
}

// TestImageIsReproducible: the same inputs give the same digest, so a
// rebuilt release image can be checked against the published one.
func TestImageIsReproducible(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "gantry")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := Options{Binary: bin, Version: "v1", Revision: "r", Created: time.Unix(0, 0)}
	a, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Fatalf("digests differ: %s, %s", da, db)
	}
}
