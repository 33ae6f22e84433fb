package loadgen

import (
	"context"
	"fmt"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
)

// bench runs single actions against a server.
type bench struct {
	plan *Plan
	conn grpc.ClientConnInterface
	cas  *client.CAS
}

// actionFunc runs the i-th action and returns its Execute latency and
// whether the server answered from the action cache.
type actionFunc func(ctx context.Context, i int) (latency time.Duration, cached bool, err error)

// runAction uploads, executes and checks one unique action.
func (b *bench) runAction(ctx context.Context, _ int) (time.Duration, bool, error) {
	id := client.NewUUID()
	cmd, action := buildAction(b.plan, id)
	blobs := map[digest.Digest][]byte{}
	put := func(m proto.Message) (digest.Digest, error) {
		data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			return digest.Digest{}, err
		}
		d := digest.Compute(digest.SHA256, data)
		blobs[d] = data
		return d, nil
	}
	cd, err := put(cmd)
	if err != nil {
		return 0, false, fmt.Errorf("encoding the Command: %w", err)
	}
	action.CommandDigest = cd.Proto()
	ad, err := put(action)
	if err != nil {
		return 0, false, fmt.Errorf("encoding the Action: %w", err)
	}
	upload := b.cas.PutNew
	if b.plan.FindMissing {
		upload = b.cas.PutMany
	}
	if err := upload(ctx, blobs); err != nil {
		return 0, false, fmt.Errorf("uploading action %s: %w", ad, err)
	}
	req := &repb.ExecuteRequest{
		InstanceName:    b.plan.Instance,
		ActionDigest:    ad.Proto(),
		SkipCacheLookup: b.plan.SkipCacheLookup,
		DigestFunction:  digest.SHA256,
	}
	start := time.Now()
	resp, op, err := client.Execute(ctx, b.conn, req)
	latency := time.Since(start)
	if err != nil {
		if status.Code(err) == codes.Unimplemented {
			return latency, false, fmt.Errorf("%w; the server at %s does not implement the Execution service: point --server at a remote execution endpoint", err, b.plan.Server)
		}
		return latency, false, err
	}
	if err := checkBenchResponse(resp, b.plan.OutputFile, id, b.plan.NoopWorkers > 0); err != nil {
		return latency, false, fmt.Errorf("action %s (operation %s): %w", ad, op, err)
	}
	return latency, resp.CachedResult, nil
}

// buildAction makes the unique action with id: its Command and its Action
// without the command digest.
func buildAction(plan *Plan, id string) (*repb.Command, *repb.Action) {
	cmd := &repb.Command{
		// Sorted by name, as REAPI requires. PATH lets "true" be found.
		EnvironmentVariables: []*repb.Command_EnvironmentVariable{
			{Name: benchIDVar, Value: id},
			{Name: "PATH", Value: "/bin:/usr/bin"},
		},
		Platform: plan.Platform,
	}
	if plan.OutputFile {
		cmd.Arguments = []string{"/bin/sh", "-c", "echo " + id + " > " + benchOutput}
		// output_paths is what servers of REAPI 2.1 and later read (they
		// ignore output_files once it is set); output_files is what 2.0
		// servers read. Setting both serves either kind.
		cmd.OutputPaths = []string{benchOutput}
		cmd.OutputFiles = []string{benchOutput}
	} else {
		cmd.Arguments = []string{"true"}
	}
	action := &repb.Action{
		// The empty Directory serializes to the empty blob, which every
		// server has.
		InputRootDigest: digest.Empty(digest.SHA256).Proto(),
		Platform:        plan.Platform,
	}
	return cmd, action
}

// checkBenchResponse checks that resp is a successful run of the action
// with id. With outputFile, the file "out" must hold id and a newline,
// or, when no-op workers may have run it, be empty.
func checkBenchResponse(resp *repb.ExecuteResponse, outputFile bool, id string, noopWorkers bool) error {
	if err := client.CheckResponse(resp); err != nil {
		return err
	}
	if !outputFile {
		return nil
	}
	want := digest.Compute(digest.SHA256, []byte(id+"\n"))
	for _, f := range resp.Result.OutputFiles {
		if f.Path != benchOutput {
			continue
		}
		if proto.Equal(f.Digest, want.Proto()) || noopWorkers && proto.Equal(f.Digest, digest.Empty(digest.SHA256).Proto()) {
			return nil
		}
		return fmt.Errorf("output file %q has digest %s/%d, but `echo %s` writes %s; the server returned the wrong output", benchOutput, f.Digest.GetHash(), f.Digest.GetSizeBytes(), id, want)
	}
	return fmt.Errorf("the result has no output file %q, although the command declares it and exited with 0; the server did not collect it", benchOutput)
}
