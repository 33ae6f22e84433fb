package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bspb "google.golang.org/genproto/googleapis/bytestream"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/dirlock"
	"github.com/gantry-build/gantry/internal/statestore/pgtest"
)

// storeCombo is one choice of the stores that live in a data dir.
type storeCombo struct{ cas, state string }

func (c storeCombo) String() string { return "cas=" + c.cas + ",state=" + c.state }

func (c storeCombo) apply(cfg *config.Config) {
	cfg.Storage.CAS.Backend = c.cas
	cfg.Storage.ActionCache.Backend = c.cas
	cfg.Scheduler.Store = config.StoreConfig{Backend: c.state}
}

var storeCombos = []storeCombo{{"disk", "embedded"}, {"disk", "memory"}, {"memory", "embedded"}, {"memory", "memory"}}

// dirListing is every path under dir with its size, but the lock file
// (whose details the holder wrote).
func dirListing(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == dirlock.FileName {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		size := info.Size()
		if d.IsDir() {
			size = 0
		}
		out[strings.TrimPrefix(p, dir)] = size
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pausedUpload writes the first half of a 3 MiB blob with ByteStream and
// breaks the stream, leaving a resumable upload on the server; finish
// sends the rest and checks the blob is stored.
func pausedUpload(t *testing.T, f *farm) (finish func()) {
	t.Helper()
	data := make([]byte, 3<<20)
	rand.Read(data)
	d := digest.Compute(digest.SHA256, data)
	name := "uploads/7d0c3e3a-2b1f-4c55-9e0e-1a2b3c4d5e6f/blobs/" + d.ResourceSegment()
	bs := bspb.NewByteStreamClient(f.conn)
	half := int64(len(data) / 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := bs.Write(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Send(&bspb.WriteRequest{ResourceName: name, Data: data[:half]}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		st, err := bs.QueryWriteStatus(ctx, &bspb.QueryWriteStatusRequest{ResourceName: name})
		if err == nil && st.CommittedSize == half {
			break
		}
		if i == 500 {
			t.Fatalf("the server never committed the first half: %v, %v", st, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel() // break the stream: the upload stays, to be resumed
	return func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := bs.QueryWriteStatus(ctx, &bspb.QueryWriteStatusRequest{ResourceName: name})
		if err != nil || st.CommittedSize != half {
			t.Fatalf("the paused upload after the refused process: %v, %v (want committed_size %d)", st, err, half)
		}
		w, err := bs.Write(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Send(&bspb.WriteRequest{ResourceName: name, WriteOffset: half, Data: data[half:], FinishWrite: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.CloseAndRecv(); err != nil {
			t.Fatalf("resuming the paused upload after the refused process: %v", err)
		}
		got, err := blobstore.Get(ctx, f.cas, d)
		if err != nil || string(got) != string(data) {
			t.Fatalf("the resumed blob: %d bytes, %v", len(got), err)
		}
	}
}

// intruders try to start on dir in every role and store combination;
// each must be refused naming this process, before touching a file.
func assertIntrudersRefused(t *testing.T, dir string) {
	t.Helper()
	before := dirListing(t, dir)
	for _, c := range storeCombos {
		cfg := config.Default()
		cfg.Listen = "127.0.0.1:0"
		cfg.HTTPListen = ""
		cfg.DataDir = dir
		c.apply(&cfg)
		srv, err := New(cfg, quietLogger())
		if err == nil {
			srv.Stop()
		}
		checkRefused(t, "role all "+c.String(), err)

		fcfg := config.Default()
		fcfg.Role = config.RoleFrontend
		fcfg.Listen = "127.0.0.1:0"
		fcfg.HTTPListen = ""
		fcfg.DataDir = dir
		fcfg.Worker.Enabled = false
		fcfg.Storage.CAS.Backend = c.cas
		fcfg.Storage.ActionCache.Backend = c.cas
		// Refused before it dials: the database need not exist.
		fcfg.Scheduler.Store = config.StoreConfig{Backend: "postgres", DSN: "postgres://gantry@127.0.0.1:1/none"}
		_, err = newFrontendNode(fcfg, quietLogger())
		checkRefused(t, "role frontend cas="+c.cas, err)
	}
	after := dirListing(t, dir)
	for p, size := range before {
		if got, ok := after[p]; !ok {
			t.Errorf("%s was deleted by a refused process", p)
		} else if got != size && !strings.HasPrefix(p, "/scheduler/state") && !(strings.HasPrefix(p, "/cas/tmp/") && got > size) {
			// (the holder's own state log may grow meanwhile, and so may
			// the file of its paused upload while the data it already
			// acknowledged reaches the disk)
			t.Errorf("%s changed size %d -> %d while a refused process started", p, size, got)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s appeared while a refused process started", p)
		}
	}
}

func checkRefused(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, dirlock.ErrLocked) {
		t.Errorf("%s on a data dir in use: err = %v, want a refusal", what, err)
		return
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) || !strings.Contains(err.Error(), "data_dir") {
		t.Errorf("%s: the refusal %q does not name the key and the other process", what, err)
	}
}

// TestSecondServeOnDataDirIsRefused: a second gantry process on a data
// dir that a live one uses is refused before it opens a store, in every
// role and store combination, and the first keeps its paused upload and
// takes small blobs afterwards.
func TestSecondServeOnDataDirIsRefused(t *testing.T) {
	for _, c := range storeCombos {
		t.Run("holder role all "+c.String(), func(t *testing.T) {
			f := startFarm(t, c.apply)
			finish := pausedUpload(t, f)
			assertIntrudersRefused(t, f.dir)
			finish()
			f.putBytes([]byte("a small blob after the refused process " + c.String()))
			f.stop()
			// Stopped, the directory is free again.
			f2 := startFarm(t, func(cfg *config.Config) { c.apply(cfg); cfg.DataDir = f.dir })
			f2.putBytes([]byte("the next process"))
		})
	}
	t.Run("holder role frontend", func(t *testing.T) {
		dsn := pgtest.Start(t)
		fcfg := clusterConfig(t, config.RoleFrontend, dsn)
		fe, err := newFrontendNode(fcfg, quietLogger())
		if err != nil {
			t.Fatal(err)
		}
		runNode(t, fe)
		conn := mustDial(t, fe.GRPCAddr())
		f := &farm{t: t, conn: conn, cas: client.NewCAS(conn, "", digest.SHA256, 0), dir: fcfg.DataDir}
		finish := pausedUpload(t, f)
		assertIntrudersRefused(t, fcfg.DataDir)
		finish()
		f.putBytes([]byte("a small blob after the refused process"))
	})
}
