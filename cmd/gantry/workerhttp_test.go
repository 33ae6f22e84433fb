package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/server"
	"github.com/gantry-build/gantry/internal/worker"
)

// standaloneWorker runs a server without an embedded worker and a worker
// of config wc with its own HTTP port (addr) until the test ends, and
// returns a connection to the server and put, which stores a blob.
func standaloneWorker(t *testing.T, wc config.WorkerConfig) (ctx context.Context, conn *grpc.ClientConn, addr string, put func([]byte) digest.Digest) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := config.Default()
	cfg.Listen, cfg.HTTPListen, cfg.DataDir = "127.0.0.1:0", "", t.TempDir()
	cfg.Worker.Enabled = false
	srv, err := server.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srvDone := make(chan struct{})
	go func() { srv.Run(ctx); close(srvDone) }()
	t.Cleanup(func() { cancel(); <-srvDone })
	conn, err = client.Dial(srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	w, err := worker.New(conn, workerpb.NewWorkersClient(conn), server.WorkerConfig(wc, log))
	if err != nil {
		t.Fatal(err)
	}
	addr, stopHTTP, err := serveWorkerHTTP("127.0.0.1:0", config.Default(), w, log)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	wDone := make(chan struct{})
	go func() { w.Run(wctx); close(wDone) }()
	t.Cleanup(func() { wcancel(); <-wDone; stopHTTP() })

	cas := client.NewCAS(conn, "", digest.SHA256, 0)
	put = func(b []byte) digest.Digest {
		d := digest.Compute(digest.SHA256, b)
		if err := blobstore.Put(ctx, cas, d, b); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return ctx, conn, addr, put
}

// TestStandaloneWorkerMetrics runs a server without an embedded worker
// and a worker with its own HTTP port, runs one action with one input
// file, and reads the worker's /metrics.
func TestStandaloneWorkerMetrics(t *testing.T) {
	ctx, conn, addr, put := standaloneWorker(t, config.WorkerConfig{ID: "w1", Cores: 1, WorkDir: t.TempDir(), AcceptUnknownProperties: true, CacheMaxSize: 1 << 30})
	putMsg := func(m proto.Message) digest.Digest { b, _ := proto.Marshal(m); return put(b) }
	input := []byte("twelve bytes")
	root := putMsg(&repb.Directory{Files: []*repb.FileNode{{Name: "in.txt", Digest: put(input).Proto()}}})
	cmd := putMsg(&repb.Command{Arguments: []string{"/bin/sh", "-c", "cat in.txt"}, EnvironmentVariables: []*repb.Command_EnvironmentVariable{{Name: "PATH", Value: "/usr/bin:/bin"}}})
	action := putMsg(&repb.Action{CommandDigest: cmd.Proto(), InputRootDigest: root.Proto()})
	ectx, ecancel := context.WithTimeout(ctx, time.Minute)
	defer ecancel()
	resp, _, err := client.Execute(ectx, conn, &repb.ExecuteRequest{ActionDigest: action.Proto()})
	if err != nil || resp.Result.GetExitCode() != 0 {
		t.Fatalf("Execute: %v %v", resp, err)
	}

	var fams map[string]*dto.MetricFamily
	value := func(name, stage string) float64 {
		f := fams[name]
		if f == nil {
			return -1
		}
		for _, m := range f.Metric {
			if stage != "" && (len(m.Label) == 0 || m.Label[0].GetValue() != stage) {
				continue
			}
			switch {
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			case m.Counter != nil:
				return m.Counter.GetValue()
			default:
				return m.Gauge.GetValue()
			}
		}
		return -1
	}
	// The stages are observed as the lease ends, just after the result
	// is delivered, and the lease is let go after that: wait for both,
	// bounded.
	for deadline := time.Now().Add(20 * time.Second); ; {
		r, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err = parser.TextToMetricFamilies(r.Body)
		r.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if (value("gantry_worker_stage_duration_seconds", "worker") == 1 && value("gantry_worker_active_leases", "") == 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range []struct {
		name, stage string
		want        float64
	}{
		{"gantry_worker_stage_duration_seconds", "input_fetch", 1},
		{"gantry_worker_stage_duration_seconds", "execute", 1},
		{"gantry_worker_stage_duration_seconds", "output_upload", 1},
		{"gantry_worker_stage_duration_seconds", "worker", 1},
		{"gantry_worker_active_leases", "", 0},
		{"gantry_worker_input_cache_misses_total", "", 1},
		{"gantry_worker_input_cache_hits_total", "", 0},
		{"gantry_worker_input_cache_files", "", 1},
		{"gantry_worker_input_cache_bytes", "", float64(len(input))},
		{"gantry_worker_input_cache_downloaded_bytes_total", "", float64(len(input))},
		{"gantry_worker_input_cache_max_bytes", "", 1 << 30},
	} {
		if got := value(c.name, c.stage); got != c.want {
			t.Errorf("%s %s = %g, want %g", c.name, c.stage, got, c.want)
		}
	}
	if r, err := http.Get("http://" + addr + "/healthz"); err != nil || r.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %v %v", r, err)
	}
}
