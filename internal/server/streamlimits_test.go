package server

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/digest"
)

// stalledUpload starts an upload of a 4-byte blob in instance inst,
// sends its first 2 bytes and leaves it open until ctx ends. It returns
// once the server holds the 2 bytes (QueryWriteStatus), so the stream is
// surely counted.
func stalledUpload(t *testing.T, ctx context.Context, conn *grpc.ClientConn, inst string) {
	t.Helper()
	d := digest.Compute(digest.SHA256, []byte("abcd"))
	name := inst + "/uploads/" + client.NewUUID() + "/blobs/" + d.Hash + "/4"
	bs := bytestream.NewByteStreamClient(conn)
	s, err := bs.Write(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&bytestream.WriteRequest{ResourceName: name, Data: []byte("ab")}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		r, err := bs.QueryWriteStatus(ctx, &bytestream.QueryWriteStatusRequest{ResourceName: name})
		if err == nil && r.CommittedSize == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stalled upload %s never showed in QueryWriteStatus: %v, %v", name, r, err)
		}
	}
}

// upload writes data in one message, as the blob of digest d; an error
// is the server's answer.
func upload(ctx context.Context, conn *grpc.ClientConn, inst string, d digest.Digest, data []byte) error {
	s, err := bytestream.NewByteStreamClient(conn).Write(ctx)
	if err != nil {
		return err
	}
	s.Send(&bytestream.WriteRequest{ResourceName: inst + "/uploads/" + client.NewUUID() + "/blobs/" + d.Hash + "/" + strconv.FormatInt(d.Size, 10), Data: data, FinishWrite: true})
	_, err = s.CloseAndRecv()
	return err
}

func uploadBlob(ctx context.Context, conn *grpc.ClientConn, inst string, data []byte) error {
	return upload(ctx, conn, inst, digest.Compute(digest.SHA256, data), data)
}

// TestStreamsPerIdentityBounded: with N uploads (or streams) per identity,
// the N+1th stalled upload of one token is refused with RESOURCE_EXHAUSTED
// naming the bound, its value and its key; another identity still
// uploads; uploads that end (finished, failed or cancelled) give their
// slot back, so the first identity uploads again; the metrics show it.
func TestStreamsPerIdentityBounded(t *testing.T) {
	for _, tc := range []struct {
		name              string
		streams, uploads  int
		key, what         string
		refusalsKindLabel string
	}{
		{"uploads", 10, 3, "grpc.max_uploads_per_identity: 3", "3 uploads", "upload"},
		{"streams", 3, 0, "grpc.max_streams_per_identity: 3", "3 streams", "stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startSecureFarm(t, func(c *config.Config) {
				c.Worker.Enabled = false
				c.GRPC.MaxStreamsPerIdentity, c.GRPC.MaxUploadsPerIdentity = tc.streams, tc.uploads
			})
			ctx := ctxT(t)
			alice, bob := f.as("alice"), f.as("bob")
			const n = 3

			// Uploads that finish, and uploads that fail, give their slot
			// back: more of them than the bound, one after another.
			for i := range n + 2 {
				if err := uploadBlob(ctx, alice, "team-a/x", []byte{'s', byte(i)}); err != nil {
					t.Fatalf("upload %d: %v", i, err)
				}
				wrong := digest.Compute(digest.SHA256, []byte{'w', byte(i)})
				if err := upload(ctx, alice, "team-a/x", wrong, []byte("xy")); status.Code(err) != codes.InvalidArgument {
					t.Fatalf("upload %d of data not matching its digest: %v, want INVALID_ARGUMENT (and no slot kept)", i, err)
				}
			}

			stalled, cancel := context.WithCancel(ctx)
			for range n {
				stalledUpload(t, stalled, alice, "team-a/x")
			}
			err := uploadBlob(ctx, alice, "team-a/x", []byte("one too many"))
			msg := status.Convert(err).Message()
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("upload %d of alice: %v, want RESOURCE_EXHAUSTED", n+1, err)
			}
			for _, want := range []string{"token:alice", tc.what, tc.key, "retry"} {
				if !strings.Contains(msg, want) {
					t.Errorf("refusal %q does not say %q", msg, want)
				}
			}
			if err := uploadBlob(ctx, bob, "team-b/x", []byte("bob's")); err != nil {
				t.Errorf("bob's upload while alice is at her bound: %v", err)
			}
			_, metrics := f.httpsGet(f.srv.HTTPAddr(), "/metrics", "p-status")
			for _, want := range []string{
				`gantry_grpc_open_streams{kind="stream"} 3`,
				`gantry_grpc_open_streams_busiest_caller{kind="stream"} 3`,
				`gantry_grpc_stream_refusals_total{kind="` + tc.refusalsKindLabel + `"} 1`,
				`gantry_grpc_streams_per_caller_limit{kind="upload"} ` + strconv.Itoa(tc.uploads),
			} {
				if !strings.Contains(metrics, want) {
					t.Errorf("/metrics lacks %s", want)
				}
			}

			// Cancelled uploads give their slots back once the server has
			// seen them end: alice's next upload succeeds (as Bazel retries).
			cancel()
			deadline := time.Now().Add(10 * time.Second)
			for {
				err := uploadBlob(ctx, alice, "team-a/x", []byte("after the cancel"))
				if err == nil {
					break
				}
				if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
					t.Fatalf("alice's upload after cancelling the stalled ones: %v", err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				_, metrics := f.httpsGet(f.srv.HTTPAddr(), "/metrics", "p-status")
				if strings.Contains(metrics, `gantry_grpc_open_streams{kind="stream"} 0`) && strings.Contains(metrics, `gantry_grpc_open_streams{kind="upload"} 0`) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("streams still counted open after every upload ended")
				}
			}
		})
	}
}

// TestAnonymousCallersCountedByAddress: with auth off, callers are
// counted by the address they connect from: a second connection from the
// same address shares the first one's bound.
func TestAnonymousCallersCountedByAddress(t *testing.T) {
	f := startFarm(t, func(c *config.Config) {
		c.Worker.Enabled = false
		c.GRPC.MaxUploadsPerIdentity = 1
	})
	ctx := ctxT(t)
	stalledUpload(t, ctx, f.conn, "main")
	other, err := client.Dial(f.srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	err = uploadBlob(ctx, other, "main", []byte("second connection"))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "the anonymous caller at 127.0.0.1 already has 1 uploads") {
		t.Fatalf("upload from a second connection of the same address: %v, want RESOURCE_EXHAUSTED naming the address", err)
	}
}
