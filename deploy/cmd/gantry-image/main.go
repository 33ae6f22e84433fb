// Command gantry-image writes Gantry's OCI image (package image) to an OCI
// archive, without a container engine. scripts/package.sh runs it:
//
//	go run ./cmd/gantry-image --binary dist/gantry --version v1.2.3 --revision SHA --out dist/gantry-image.tar
//
// Load the archive with `podman load -i FILE` (then podman push), or copy it
// to a registry with `skopeo copy oci-archive:FILE docker://REGISTRY/gantry:TAG`.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/gantry-build/gantry/deploy/image"
)

func main() {
	var o image.Options
	var out, ref, created string
	flag.StringVar(&o.Binary, "binary", "dist/gantry", "static gantry binary (CGO_ENABLED=0)")
	flag.StringVar(&o.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "PEM bundle of CA certificates to include (empty: none)")
	flag.StringVar(&o.Version, "version", "dev", "org.opencontainers.image.version label and tag")
	flag.StringVar(&o.Revision, "revision", "unknown", "org.opencontainers.image.revision label (the commit)")
	flag.StringVar(&created, "created", "", "creation time, RFC 3339 (empty: the Unix epoch, reproducible)")
	flag.StringVar(&out, "out", "dist/gantry-image.tar", "OCI archive to write")
	flag.StringVar(&ref, "ref", "", "image reference recorded in the archive (default gantry:VERSION)")
	flag.Parse()
	if err := run(o, created, ref, out); err != nil {
		fmt.Fprintln(os.Stderr, "gantry-image:", err)
		os.Exit(1)
	}
}

func run(o image.Options, created, ref, out string) error {
	o.Created = time.Unix(0, 0).UTC()
	if created != "" {
		t, err := time.Parse(time.RFC3339, created)
		if err != nil {
			return fmt.Errorf("--created %q: write it as RFC 3339, e.g. 2026-11-26T12:00:00Z", created)
		}
		o.Created = t
	}
	if ref == "" {
		ref = "gantry:" + tagOf(o.Version)
	}
	img, err := image.Build(o)
	if err != nil {
		return err
	}
	if err := image.WriteOCIArchive(img, ref, out); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "gantry-image: wrote %s (%s, %s)\n", out, ref, d)
	return nil
}

// tagOf turns a version into a valid tag: '+' (build metadata) is not
// allowed in tags.
func tagOf(v string) string {
	out := []rune(v)
	for i, r := range out {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			out[i] = '_'
		}
	}
	return string(out)
}
