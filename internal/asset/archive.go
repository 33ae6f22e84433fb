package asset

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
)

// Format is an archive format FetchDirectory unpacks.
type Format string

// Formats.
const (
	Tar    Format = "tar"
	TarGz  Format = "tar.gz"
	TarXz  Format = "tar.xz"
	TarZst Format = "tar.zst"
	Zip    Format = "zip"
)

// resourceTypes maps the resource_type qualifier's media types to
// formats.
var resourceTypes = map[string]Format{
	"application/x-tar":               Tar,
	"application/gzip":                TarGz,
	"application/x-gzip":              TarGz,
	"application/x-gtar":              TarGz,
	"application/x-compressed-tar":    TarGz,
	"application/x-xz":                TarXz,
	"application/x-xz-compressed-tar": TarXz,
	"application/zstd":                TarZst,
	"application/zip":                 Zip,
}

// DetectFormat chooses the format of the archive at uri: by the
// resource_type qualifier if given, else by the name's extension.
func DetectFormat(uri, resourceType string) (Format, error) {
	if resourceType != "" {
		if f, ok := resourceTypes[resourceType]; ok {
			return f, nil
		}
		return "", fmt.Errorf("resource_type %q is not an archive type Gantry unpacks; use one of %s", resourceType, strings.Join(sortedKeys(resourceTypes), ", "))
	}
	name := uri
	if u, err := url.Parse(uri); err == nil {
		name = u.Path
	}
	name = strings.ToLower(name)
	for _, s := range []struct {
		ext string
		f   Format
	}{{".tar.gz", TarGz}, {".tgz", TarGz}, {".tar.xz", TarXz}, {".txz", TarXz}, {".tar.zst", TarZst}, {".tzst", TarZst}, {".tar", Tar}, {".zip", Zip}, {".jar", Zip}} {
		if strings.HasSuffix(name, s.ext) {
			return s.f, nil
		}
	}
	return "", fmt.Errorf("cannot tell the archive format of %s from its name; give a resource_type qualifier (application/x-tar, application/gzip, application/x-xz, application/zstd, application/zip)", uri)
}

// Limits bound what unpacking an archive may produce.
type Limits struct {
	// MaxExpandedSize bounds the total bytes of the files (zip bombs).
	MaxExpandedSize int64
	// MaxEntries bounds the number of entries.
	MaxEntries int
}

// unpacker turns an archive into a tree in the CAS.
type unpacker struct {
	ctx     context.Context
	cas     blobstore.Store
	fn      digest.Function
	limits  Limits
	tempDir string
	tree    *tree
	used    int64 // expanded bytes so far
	entries int
}

// Unpack reads the archive r (size bytes, of format) and stores its
// files and Directory messages in cas, returning the root Directory's
// digest. Hostile archives are refused with an *ArchiveError.
func Unpack(ctx context.Context, r io.ReaderAt, size int64, format Format, limits Limits, cas blobstore.Store, fn digest.Function, tempDir string) (digest.Digest, error) {
	u := &unpacker{ctx: ctx, cas: cas, fn: fn, limits: limits, tempDir: tempDir, tree: newTree()}
	var err error
	if format == Zip {
		err = u.zip(r, size)
	} else if format == TarXz {
		if err = checkXZDict(r); err == nil {
			err = u.tar(io.NewSectionReader(r, 0, size), format)
		}
	} else {
		err = u.tar(io.NewSectionReader(r, 0, size), format)
	}
	if err != nil {
		return digest.Digest{}, err
	}
	return u.tree.store(ctx, cas, fn)
}

func (u *unpacker) tar(r io.Reader, format Format) error {
	switch format {
	case TarGz:
		gz, err := gzip.NewReader(r)
		if err != nil {
			return &ArchiveError{"", "not gzip data: " + err.Error()}
		}
		defer gz.Close()
		r = gz
	case TarXz:
		x, err := xz.NewReader(r)
		if err != nil {
			return &ArchiveError{"", "not xz data: " + err.Error()}
		}
		r = x
	case TarZst:
		z, err := zstd.NewReader(r, zstd.WithDecoderMaxMemory(maxXZDict), zstd.WithDecoderMaxWindow(maxXZDict), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return &ArchiveError{"", "not zstd data: " + err.Error()}
		}
		defer z.Close()
		r = z
	case Tar:
	default:
		return fmt.Errorf("unknown archive format %q", format)
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return &ArchiveError{"", "not a valid tar stream: " + err.Error()}
		}
		if err := u.count(hdr.Name); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		p, err := cleanEntryPath(hdr.Name)
		if err != nil {
			return err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = u.tree.addDir(hdr.Name, p)
		case tar.TypeReg: // archive/tar reports the old TypeRegA as TypeReg
			err = u.file(hdr.Name, p, tr, hdr.Size, hdr.Mode&0o111 != 0)
		case tar.TypeSymlink:
			err = u.tree.addLink(hdr.Name, p, hdr.Linkname)
		case tar.TypeLink:
			err = u.hardLink(hdr.Name, p, hdr.Linkname)
		default:
			err = &ArchiveError{hdr.Name, fmt.Sprintf("is of tar type %q; only files, directories and links are unpacked", hdr.Typeflag)}
		}
		if err != nil {
			return err
		}
	}
}

func (u *unpacker) hardLink(name, p, target string) error {
	t, err := cleanEntryPath(target)
	if err != nil {
		return &ArchiveError{name, fmt.Sprintf("is a hard link to %q, outside the archive", target)}
	}
	f, ok := u.tree.file(t)
	if !ok {
		return &ArchiveError{name, fmt.Sprintf("is a hard link to %q, which is not a file earlier in the archive", target)}
	}
	d, _ := digest.FromProto(u.fn, f.Digest)
	return u.tree.addFile(name, p, d, f.IsExecutable)
}

func (u *unpacker) count(name string) error {
	u.entries++
	if u.limits.MaxEntries > 0 && u.entries > u.limits.MaxEntries {
		return &ArchiveError{name, fmt.Sprintf("is beyond the limit of %d entries (remote_asset.max_archive_entries)", u.limits.MaxEntries)}
	}
	return u.ctx.Err()
}

// file stores one file's content, of announced size.
func (u *unpacker) file(name, p string, r io.Reader, size int64, exec bool) error {
	left := u.limits.MaxExpandedSize - u.used
	if size > left {
		return u.tooBig(name)
	}
	s := newSpool(u.tempDir, u.fn)
	defer s.Close()
	n, err := io.Copy(s, io.LimitReader(r, left+1))
	u.used += n
	if err != nil {
		return &ArchiveError{name, "cannot be read: " + err.Error()}
	}
	if n > left {
		return u.tooBig(name)
	}
	d, err := s.Store(u.ctx, u.cas)
	if err != nil {
		return err
	}
	return u.tree.addFile(name, p, d, exec)
}

func (u *unpacker) tooBig(name string) error {
	return &ArchiveError{name, fmt.Sprintf("takes the unpacked size beyond remote_asset.max_archive_expanded_size (%d bytes)", u.limits.MaxExpandedSize)}
}

func (u *unpacker) zip(r io.ReaderAt, size int64) error {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return &ArchiveError{"", "not a valid zip file: " + err.Error()}
	}
	for _, f := range zr.File {
		if err := u.count(f.Name); err != nil {
			return err
		}
		p, err := cleanEntryPath(f.Name)
		if err != nil {
			return err
		}
		mode := f.Mode()
		switch {
		case mode.IsDir() || strings.HasSuffix(f.Name, "/"):
			err = u.tree.addDir(f.Name, p)
		case mode&fs.ModeSymlink != 0:
			err = u.zipLink(f, p)
		case mode.IsRegular():
			var rc io.ReadCloser
			if rc, err = f.Open(); err != nil {
				return &ArchiveError{f.Name, "cannot be read: " + err.Error()}
			}
			err = u.file(f.Name, p, rc, int64(min(f.UncompressedSize64, 1<<62)), mode&0o111 != 0)
			rc.Close()
		default:
			err = &ArchiveError{f.Name, fmt.Sprintf("has mode %v; only files, directories and symbolic links are unpacked", mode)}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// zipLink adds a symbolic link, whose target is the entry's content.
func (u *unpacker) zipLink(f *zip.File, p string) error {
	rc, err := f.Open()
	if err != nil {
		return &ArchiveError{f.Name, "cannot be read: " + err.Error()}
	}
	defer rc.Close()
	target, err := io.ReadAll(io.LimitReader(rc, 4096))
	if err != nil {
		return &ArchiveError{f.Name, "cannot be read: " + err.Error()}
	}
	return u.tree.addLink(f.Name, p, string(target))
}
