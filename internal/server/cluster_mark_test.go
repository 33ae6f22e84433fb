package server

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
)

// TestClusterSchedulerMarkNeedsSchedulerIdentity: with auth on, a
// client that sets the header marking a scheduler node's CAS calls is
// counted like any client; the scheduler node (cluster.scheduler_identities)
// still is not.
func TestClusterSchedulerMarkNeedsSchedulerIdentity(t *testing.T) {
	c := startSecureCluster(t, func(cfg *config.Config) {
		cfg.Cluster.SchedulerIdentities = []string{"cert:scheduler-1"}
	})
	metrics := func() map[string]*dto.MetricFamily {
		t.Helper()
		code, body := c.httpsGet(c.fe.HTTPAddr(), "/metrics", "p-status")
		if code != 200 {
			t.Fatalf("frontend /metrics: %d %.200s", code, body)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		return fams
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// "ci" may write everywhere; it poses as a scheduler node.
	marked := metadata.AppendToOutgoingContext(ctx, schedulerCallHeader, "1")
	cas := client.NewCAS(c.as("ci"), "team-a/x", digest.SHA256, 0)
	for _, size := range []int{100 << 10, 3 << 20} { // batch and ByteStream
		blob := bytes.Repeat([]byte{byte(size)}, size)
		before := metrics()
		if err := blobstore.Put(marked, cas, digest.Compute(digest.SHA256, blob), blob); err != nil {
			t.Fatal(err)
		}
		if got := sample(metrics(), "gantry_cas_received_bytes_total") - sample(before, "gantry_cas_received_bytes_total"); got != float64(size) {
			t.Errorf("a client's %d-byte upload marked as a scheduler's was counted as %g bytes, want all of it", size, got)
		}
	}

	// The scheduler node's own read of a queued action is not counted.
	alice := c.as("alice")
	acas := client.NewCAS(alice, "team-a/x", digest.SHA256, 0)
	put := func(m proto.Message) digest.Digest {
		b, _ := proto.Marshal(m)
		d := digest.Compute(digest.SHA256, b)
		if err := blobstore.Put(ctx, acas, d, b); err != nil {
			t.Fatal(err)
		}
		return d
	}
	ad := put(&repb.Action{CommandDigest: put(shCmd("true")).Proto(), InputRootDigest: digest.Empty(digest.SHA256).Proto()})
	before := metrics()
	stream, err := repb.NewExecutionClient(alice).Execute(ctx, &repb.ExecuteRequest{InstanceName: "team-a/x", ActionDigest: ad.Proto()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	clusterWaitFor(t, "the action in the leader's queue", func() bool { return c.sched.Scheduler().Stats().Queued == 1 })
	if d := sample(metrics(), "gantry_cas_sent_bytes_total") - sample(before, "gantry_cas_sent_bytes_total"); d != 0 {
		t.Errorf("the scheduler node's reads of the action were counted as %g client bytes", d)
	}
}
