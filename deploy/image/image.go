// Package image builds Gantry's OCI container image without a container
// engine: one layer on an empty base (scratch) holding the static gantry
// binary, a minimal /etc/passwd and /etc/group naming the non-root user, the
// build machine's CA certificates, /tmp and the data directory.
package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed facts, which the chart and docs rely on.
const (
	// UID and GID of the gantry user (distroless' "nonroot" number).
	UID = 65532
	GID = 65532
	// User is the image's user, numeric so that Kubernetes' runAsNonRoot
	// can verify it without reading /etc/passwd.
	User = "65532:65532"
	// BinaryPath is where the binary lives; the entrypoint runs it.
	BinaryPath = "/usr/bin/gantry"
	// DataDir is the data volume.
	DataDir = "/var/lib/gantry"
	// GRPCPort and HTTPPort are the ports the default command listens on.
	GRPCPort = 8980
	HTTPPort = 9090
	// Source is the org.opencontainers.image.source label.
	Source = "https://github.com/gantry-build/gantry"
)

// Options say what goes into the image.
type Options struct {
	// Binary is the path of a static (CGO_ENABLED=0) gantry binary.
	Binary string
	// CACerts is a PEM bundle copied to /etc/ssl/certs/ca-certificates.crt
	// (for S3, OTLP and TLS peers); empty leaves it out.
	CACerts string
	// Version and Revision become labels.
	Version, Revision string
	// Created is the image's creation time (zero: the Unix epoch, for
	// reproducible images).
	Created time.Time
}

// Cmd is the image's default command: an all-in-one server listening on
// every interface of the container, with its data in the volume.
func Cmd() []string {
	return []string{"serve",
		"--listen", "0.0.0.0:" + strconv.Itoa(GRPCPort),
		"--http-listen", "0.0.0.0:" + strconv.Itoa(HTTPPort),
		"--data-dir", DataDir}
}

// Build returns the image.
func Build(o Options) (v1.Image, error) {
	layerBytes, err := rootfs(o)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   v1.Time{Time: o.Created},
		CreatedBy: "gantry-image: " + BinaryPath + ", /etc/passwd, CA certificates, " + DataDir,
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: o.Created}
	cf.Config.Entrypoint = []string{BinaryPath}
	cf.Config.Cmd = Cmd()
	cf.Config.User = User
	cf.Config.WorkingDir = DataDir
	cf.Config.Env = []string{"PATH=/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	cf.Config.ExposedPorts = map[string]struct{}{
		strconv.Itoa(GRPCPort) + "/tcp": {},
		strconv.Itoa(HTTPPort) + "/tcp": {},
	}
	cf.Config.Volumes = map[string]struct{}{DataDir: {}}
	cf.Config.StopSignal = "SIGTERM"
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "gantry",
		"org.opencontainers.image.description": "Remote build execution service for Bazel and other REAPI v2 clients",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}
	return mutate.ConfigFile(img, cf)
}

// rootfs is the layer's tar: directories first, fixed times and owners.
func rootfs(o Options) ([]byte, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, fmt.Errorf("gantry binary: %w (build it with CGO_ENABLED=0, see scripts/package.sh)", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := o.Created
	dir := func(name string, mode int64, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []string{"etc", "etc/ssl", "etc/ssl/certs", "usr", "usr/bin", "var", "var/lib"} {
		if err := dir(d, 0o755, 0); err != nil {
			return nil, err
		}
	}
	// /tmp for the embedded worker's and Go's temporary files.
	if err := dir("tmp", 0o1777, 0); err != nil {
		return nil, err
	}
	// The data directory belongs to the gantry user, so that a fresh
	// volume (which takes the image's ownership) is writable.
	if err := dir(strings.TrimPrefix(DataDir, "/"), 0o750, UID); err != nil {
		return nil, err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\ngantry:x:%d:%d:gantry:%s:/sbin/nologin\n", UID, GID, DataDir)
	group := fmt.Sprintf("root:x:0:\ngantry:x:%d:\n", GID)
	if err := file("etc/passwd", 0o644, []byte(passwd)); err != nil {
		return nil, err
	}
	if err := file("etc/group", 0o644, []byte(group)); err != nil {
		return nil, err
	}
	if o.CACerts != "" {
		certs, err := os.ReadFile(o.CACerts)
		if err != nil {
			return nil, fmt.Errorf("CA certificates: %w (install ca-certificates, or pass an empty path to leave them out)", err)
		}
		if err := file("etc/ssl/certs/ca-certificates.crt", 0o644, certs); err != nil {
			return nil, err
		}
	}
	if err := file("usr/bin/gantry", 0o755, bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteOCIArchive writes img as an OCI image layout in a tar file (an
// "oci-archive", which `podman load -i`, skopeo and crane read), tagged ref
// (e.g. gantry:v1.2.3) in the index's org.opencontainers.image.ref.name.
func WriteOCIArchive(img v1.Image, ref, path string) error {
	tmp, err := os.MkdirTemp("", "gantry-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	lp, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		return err
	}
	return tarDir(tmp, path)
}

// tarDir writes the files under dir into a tar at path, in a fixed order.
func tarDir(dir, path string) error {
	out, err := os.Create(path + ".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(path + ".tmp")
	tw := tar.NewWriter(out)
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.ModTime, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = time.Unix(0, 0), 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(path+".tmp", path)
}
