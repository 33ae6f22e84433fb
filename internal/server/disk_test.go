package server

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
)

// diskModes runs a disk limit test for plain and for sandboxed actions.
var diskModes = []struct {
	name      string
	sandboxed bool
}{{"Plain", false}, {"Sandboxed", true}}

func startDiskFarm(t *testing.T, sandboxed bool, mod func(*config.Config)) *farm {
	if !sandboxed {
		return startFarm(t, mod)
	}
	requireSandbox(t)
	return startFarm(t, func(c *config.Config) {
		c.Worker.Sandbox.Mode = "all"
		c.Worker.Sandbox.UID = sandboxTestUID
		c.Worker.Sandbox.UIDCount = 2
		c.Worker.Sandbox.TmpSize = 64 << 20
		mod(c)
	})
}

// writtenUnder adds up the sizes of the regular files under dir.
func writtenUnder(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func TestDiskGuardKillsActionFillingDisk(t *testing.T) {
	for _, m := range diskModes {
		t.Run(m.name, func(t *testing.T) {
			f := startDiskFarm(t, m.sandboxed, func(c *config.Config) {
				// Keep all but 256MiB (or a quarter, on a fuller disk)
				// of what is free now: the guard fires long before the
				// disk is really full.
				var st unix.Statfs_t
				if err := unix.Statfs(c.DataDir, &st); err != nil {
					t.Fatal(err)
				}
				free := int64(st.Bavail) * int64(st.Bsize)
				if free < 64<<20 {
					msg := fmt.Sprintf("only %d bytes free under %s; the test needs 64MiB", free, c.DataDir)
					if os.Getenv("CI") == "true" {
						t.Fatal(msg)
					}
					t.Skip(msg)
				}
				c.Worker.MinFreeDisk = config.ByteSize(free - min(256<<20, free/4))
			})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			empty := digest.Empty(digest.SHA256)
			// Bounded in case the guard does not fire: 4GiB, then exit 0.
			resp := f.run(ctx, empty, shCmd("head -c 4G /dev/zero > big; echo wrote >&2; exit 0"))
			if got := codes.Code(resp.Status.GetCode()); got != codes.ResourceExhausted {
				t.Fatalf("status %v (%s), want RESOURCE_EXHAUSTED from the disk guard", got, resp.Status.GetMessage())
			}
			msg := resp.Status.GetMessage()
			for _, want := range []string{"was killed", "worker.min_free_disk", "exec root"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not say %q", msg, want)
				}
			}
			if resp.Result != nil {
				if _, stderr := f.stdio(resp.Result); !strings.Contains(stderr, "worker.min_free_disk") {
					t.Errorf("stderr %q does not carry the disk guard's note", stderr)
				}
			}
			// The exec root was emptied before the result was reported.
			if n := writtenUnder(t, filepath.Join(f.dir, "worker", "roots")); n > 1<<20 {
				t.Errorf("%d bytes are left in the exec roots after the kill", n)
			}
			f.mustWorkAfterDiskKill(ctx)

			// Endless stdout spills into the worker's log directory, on
			// the same disk: bounded the same way, and not kept.
			resp = f.run(ctx, empty, shCmd("head -c 4G /dev/zero; exit 0"))
			if got := codes.Code(resp.Status.GetCode()); got != codes.ResourceExhausted {
				t.Fatalf("stdout flood: status %v (%s), want RESOURCE_EXHAUSTED from the disk guard", got, resp.Status.GetMessage())
			}
			if msg := resp.Status.GetMessage(); !strings.Contains(msg, "worker.min_free_disk") || !strings.Contains(msg, "stdout") {
				t.Errorf("stdout flood: message %q does not name the reserve and the dropped stdout", msg)
			}
			if n := writtenUnder(t, filepath.Join(f.dir, "worker", "logs")); n > 1<<20 {
				t.Errorf("%d bytes of output are left in the worker's log directory after the kill", n)
			}
			f.mustWorkAfterDiskKill(ctx)
		})
	}
}

func TestMaxFileSizeLimitsActionFiles(t *testing.T) {
	const limit = 1 << 20
	for _, m := range diskModes {
		t.Run(m.name, func(t *testing.T) {
			f := startDiskFarm(t, m.sandboxed, func(c *config.Config) { c.Worker.MaxFileSize = limit })
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			empty := digest.Empty(digest.SHA256)
			r := f.mustRun(ctx, empty, shCmd("head -c 3M /dev/zero > big", "big"))
			_, stderr := f.stdio(r)
			if r.ExitCode == 0 {
				t.Errorf("writing 3MiB past max_file_size of 1MiB succeeded; stderr %q", stderr)
			}
			if !strings.Contains(stderr, "File too large") {
				t.Errorf("stderr %q does not report the failed write (EFBIG)", stderr)
			}
			if len(r.OutputFiles) != 1 || r.OutputFiles[0].Digest.GetSizeBytes() != limit {
				t.Errorf("output files %v, want big cut at %d bytes", r.OutputFiles, limit)
			}
			// Files under the limit are fine, and so is the next action.
			r = f.mustRun(ctx, empty, shCmd("head -c 512K /dev/zero > small", "small"))
			if r.ExitCode != 0 || len(r.OutputFiles) != 1 || r.OutputFiles[0].Digest.GetSizeBytes() != 512<<10 {
				_, stderr := f.stdio(r)
				t.Errorf("next action: exit %d, outputs %v, stderr %q", r.ExitCode, r.OutputFiles, stderr)
			}
		})
	}
}

// mustWorkAfterDiskKill checks that the worker runs the next action.
func (f *farm) mustWorkAfterDiskKill(ctx context.Context) {
	f.t.Helper()
	r := f.mustRun(ctx, digest.Empty(digest.SHA256), shCmd("echo fine > out.txt", "out.txt"))
	if r.ExitCode != 0 || len(r.OutputFiles) != 1 || f.read(r.OutputFiles[0].Digest) != "fine\n" {
		_, stderr := f.stdio(r)
		f.t.Errorf("next action: exit %d, outputs %v, stderr %q", r.ExitCode, r.OutputFiles, stderr)
	}
}
