package remote

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
	"google.golang.org/protobuf/proto"
)

// Output is what an action printed and how it ended.
type Output struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
}

// downloadGroup bounds the bytes of small blobs held in memory at once.
const downloadGroup = 32 << 20

// wantFile is one output file to write locally.
type wantFile struct {
	rel    string // slash-separated, relative to the working directory
	d      digest.Digest
	exec   bool
	inline []byte // the content if the server inlined it
}

// Download writes result's outputs under the Spec's LocalRoot/WorkingDir:
// output files (with their executable bit), output directories (from
// their Trees) and symbolic links, creating parent directories. A file
// that already has the right content is left alone (only its mode is
// fixed); others are written to a temporary file and renamed into place,
// so a reader never sees half a file. Files in a local output directory
// that the result does not list are left alone. It returns the exit code
// and stdout and stderr, fetched if they were not inlined.
//
// The result is not trusted (it may come from a shared cache): a path
// that is not one of the action's outputs (or below one) is refused, and
// nothing is written through a symbolic link (see outputDir).
func (c *Client) Download(ctx context.Context, a *Action, result *repb.ActionResult) (Output, DownloadStats, error) {
	start := time.Now()
	var stats DownloadStats
	out := Output{ExitCode: int(result.ExitCode)}
	o := newOutputDir(a.localWorkDir(), a.command.OutputPaths)
	defer o.close()

	var files []wantFile
	for _, f := range result.OutputFiles {
		if err := o.check(f.Path); err != nil {
			return out, stats, err
		}
		d, err := digest.FromProto(c.fn, f.Digest)
		if err != nil {
			return out, stats, fmt.Errorf("output %s: %w; the server is faulty", f.Path, err)
		}
		inline := f.Contents
		if int64(len(inline)) != d.Size || (inline != nil && digest.Compute(c.fn, inline) != d) {
			inline = nil // not inlined (or not wholly): fetch it
		}
		files = append(files, wantFile{rel: f.Path, d: d, exec: f.IsExecutable, inline: inline})
		stats.DownloadedBytes += int64(len(inline))
	}
	var links []*repb.OutputSymlink
	var dirs []string
	for _, od := range result.OutputDirectories {
		if err := o.check(od.Path); err != nil {
			return out, stats, err
		}
		tf, tdirs, tlinks, n, err := c.tree(ctx, od)
		stats.DownloadedBytes += n
		if err != nil {
			return out, stats, err
		}
		files, dirs, links = append(files, tf...), append(dirs, tdirs...), append(links, tlinks...)
	}
	for _, group := range [][]*repb.OutputSymlink{result.OutputSymlinks, result.OutputFileSymlinks, result.OutputDirectorySymlinks} {
		for _, l := range group {
			if err := o.check(l.Path); err != nil {
				return out, stats, err
			}
			links = append(links, l)
		}
	}

	for _, d := range dirs {
		if _, err := o.dir(d); err != nil {
			return out, stats, err
		}
	}
	n, err := c.writeFiles(ctx, o, files, &stats)
	stats.DownloadedBytes += n
	if err != nil {
		return out, stats, err
	}
	for _, l := range links {
		if err := o.symlink(l.Path, l.Target); err != nil {
			return out, stats, err
		}
	}
	if out.Stdout, n, err = c.stdio(ctx, "stdout", result.StdoutRaw, result.StdoutDigest); err != nil {
		return out, stats, err
	}
	stats.DownloadedBytes += n
	if out.Stderr, n, err = c.stdio(ctx, "stderr", result.StderrRaw, result.StderrDigest); err != nil {
		return out, stats, err
	}
	stats.DownloadedBytes += n
	stats.Duration = time.Since(start)
	return out, stats, nil
}

// tree fetches the Tree of output directory od and lists its files, its
// directories (so empty ones are created too) and symbolic links, by
// their paths relative to the working directory. It returns the bytes it
// fetched.
func (c *Client) tree(ctx context.Context, od *repb.OutputDirectory) ([]wantFile, []string, []*repb.OutputSymlink, int64, error) {
	td, err := digest.FromProto(c.fn, od.TreeDigest)
	if err != nil {
		return nil, nil, nil, 0, fmt.Errorf("output directory %s: %w; the server is faulty", od.Path, err)
	}
	blobs, err := c.cas.GetMany(ctx, []digest.Digest{td})
	if err != nil {
		return nil, nil, nil, 0, fmt.Errorf("fetching the Tree of output directory %s: %w", od.Path, err)
	}
	tree := &repb.Tree{}
	if err := proto.Unmarshal(blobs[td], tree); err != nil {
		return nil, nil, nil, td.Size, fmt.Errorf("output directory %s: its Tree %s does not decode: %v; the server is faulty", od.Path, td, err)
	}
	children := make(map[digest.Digest]*repb.Directory, len(tree.Children))
	for _, ch := range tree.Children {
		data, err := proto.MarshalOptions{Deterministic: true}.Marshal(ch)
		if err != nil {
			return nil, nil, nil, td.Size, fmt.Errorf("output directory %s: %v", od.Path, err)
		}
		children[digest.Compute(c.fn, data)] = ch
	}
	var files []wantFile
	var dirs []string
	var links []*repb.OutputSymlink
	var walk func(dir *repb.Directory, rel string, depth int) error
	walk = func(dir *repb.Directory, rel string, depth int) error {
		if depth > 1000 {
			return fmt.Errorf("output directory %s is nested more than 1000 deep; the server is faulty", od.Path)
		}
		dirs = append(dirs, rel)
		for _, f := range dir.Files {
			if err := checkName(f.Name); err != nil {
				return fmt.Errorf("output directory %s: %s: %w", od.Path, rel, err)
			}
			d, err := digest.FromProto(c.fn, f.Digest)
			if err != nil {
				return fmt.Errorf("output %s: %w; the server is faulty", path.Join(rel, f.Name), err)
			}
			files = append(files, wantFile{rel: rel + "/" + f.Name, d: d, exec: f.IsExecutable})
		}
		for _, l := range dir.Symlinks {
			if err := checkName(l.Name); err != nil {
				return fmt.Errorf("output directory %s: %s: %w", od.Path, rel, err)
			}
			links = append(links, &repb.OutputSymlink{Path: rel + "/" + l.Name, Target: l.Target})
		}
		for _, sub := range dir.Directories {
			if err := checkName(sub.Name); err != nil {
				return fmt.Errorf("output directory %s: %s: %w", od.Path, rel, err)
			}
			d, err := digest.FromProto(c.fn, sub.Digest)
			if err != nil {
				return fmt.Errorf("output %s: %w; the server is faulty", path.Join(rel, sub.Name), err)
			}
			child, ok := children[d]
			if !ok {
				return fmt.Errorf("output directory %s: the Tree lacks directory %s (%s); the server is faulty", od.Path, path.Join(rel, sub.Name), d)
			}
			if err := walk(child, rel+"/"+sub.Name, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(tree.Root, od.Path, 0); err != nil {
		return nil, nil, nil, td.Size, err
	}
	return files, dirs, links, td.Size, nil
}

// checkName rejects a Directory entry name that is not one path element.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') || strings.ContainsRune(name, 0) {
		return fmt.Errorf("bad entry name %q; the server is faulty", name)
	}
	return nil
}

// writeFiles writes files below o, skipping those already up to date. It
// fetches what it needs: small blobs in batches (a bounded group at a
// time), large ones streamed into place. It returns the bytes fetched.
func (c *Client) writeFiles(ctx context.Context, o *outputDir, files []wantFile, stats *DownloadStats) (int64, error) {
	stats.Files += len(files)
	var todo []wantFile
	for _, f := range files {
		if c.upToDate(o, f) {
			stats.Unchanged++
			continue
		}
		todo = append(todo, f)
	}
	var fetched int64
	var group []wantFile
	var groupBytes int64
	flush := func() error {
		if len(group) == 0 {
			return nil
		}
		var ds []digest.Digest
		for _, f := range group {
			ds = append(ds, f.d)
		}
		blobs, err := c.cas.GetMany(ctx, ds)
		if err != nil {
			return fmt.Errorf("fetching outputs: %w", err)
		}
		seen := make(map[digest.Digest]bool)
		for _, f := range group {
			if !seen[f.d] {
				seen[f.d] = true
				fetched += f.d.Size
			}
			if err := writeFile(o, f, blobs[f.d]); err != nil {
				return err
			}
			stats.Written++
		}
		group, groupBytes = nil, 0
		return nil
	}
	for _, f := range todo {
		switch {
		case f.inline != nil || f.d.IsEmpty():
			if err := writeFile(o, f, f.inline); err != nil {
				return fetched, err
			}
			stats.Written++
			if f.inline != nil {
				stats.Inlined++
			}
		case f.d.Size > client.SmallBlobLimit:
			n, err := c.streamTo(ctx, o, f)
			if err != nil {
				return fetched, err
			}
			fetched += n
			stats.ChunkSavedBytes += f.d.Size - n
			stats.Written++
		default:
			if groupBytes+f.d.Size > downloadGroup {
				if err := flush(); err != nil {
					return fetched, err
				}
			}
			group = append(group, f)
			groupBytes += f.d.Size
		}
	}
	return fetched, flush()
}

// upToDate reports whether the local file already has f's content, and
// then fixes its executable bit if needed.
func (c *Client) upToDate(o *outputDir, f wantFile) bool {
	fi, local, err := o.stat(f.rel)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != f.d.Size {
		return false
	}
	d, _, _, err := c.files.digestOf(c.fn, local, fi, false)
	if err != nil || d != f.d {
		return false
	}
	mode := fileMode(f.exec)
	if fi.Mode().Perm() != mode && o.chmod(f.rel, mode) != nil {
		return false
	}
	return true
}

func fileMode(exec bool) os.FileMode {
	if exec {
		return 0o755
	}
	return 0o644
}

// writeFile writes data to f's file atomically.
func writeFile(o *outputDir, f wantFile, data []byte) error {
	return o.writeFile(f.rel, f.exec, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// streamTo fetches the large blob of f straight into its file, from its
// chunks from the chunking threshold on. It returns the bytes fetched.
func (c *Client) streamTo(ctx context.Context, o *outputDir, f wantFile) (int64, error) {
	if c.chunkable(f.d.Size) {
		var n int64
		err := o.writeFile(f.rel, f.exec, func(w io.Writer) error {
			var err error
			if n, err = c.readChunked(ctx, f.d, w); err != nil {
				return fmt.Errorf("fetching output %s: %w", o.local(f.rel), err)
			}
			return nil
		})
		return n, err
	}
	r, err := c.cas.Open(ctx, f.d, 0)
	if err != nil {
		return 0, fmt.Errorf("fetching output %s: %w", o.local(f.rel), err)
	}
	defer r.Close()
	return f.d.Size, o.writeFile(f.rel, f.exec, func(w io.Writer) error {
		if _, err := io.Copy(w, r); err != nil {
			return fmt.Errorf("fetching output %s: %w", o.local(f.rel), err)
		}
		return nil
	})
}

// outputError describes an output that cannot be written locally.
func outputError(path string, err error) error {
	return fmt.Errorf("writing output %s: %w; check that its directory is writable and not a file", path, err)
}

// stdio returns an action's stdout or stderr: raw if inlined, else
// fetched by digest. It returns the bytes fetched or inlined.
func (c *Client) stdio(ctx context.Context, what string, raw []byte, pd *repb.Digest) ([]byte, int64, error) {
	if len(raw) > 0 || pd == nil {
		return raw, int64(len(raw)), nil
	}
	d, err := digest.FromProto(c.fn, pd)
	if err != nil {
		return nil, 0, fmt.Errorf("the action's %s: %w; the server is faulty", what, err)
	}
	if d.IsEmpty() {
		return nil, 0, nil
	}
	data, err := blobstore.Get(ctx, c.cas, d)
	if err != nil {
		return nil, 0, fmt.Errorf("fetching the action's %s: %w", what, err)
	}
	return data, d.Size, nil
}
