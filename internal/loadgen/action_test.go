package loadgen

import (
	"fmt"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/digest"
)

func TestBuildAction(t *testing.T) {
	plat, err := ParsePlatform([]string{"OSFamily=linux"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		plan      Plan
		wantArgs  string
		wantFiles []string
	}{
		{"output file", Plan{OutputFile: true, Platform: plat}, "/bin/sh -c echo ID > out", []string{"out"}},
		{"no outputs", Plan{}, "true", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd, action := buildAction(&tt.plan, "ID")
			if got := strings.Join(cmd.Arguments, " "); got != tt.wantArgs {
				t.Errorf("arguments %q, want %q", got, tt.wantArgs)
			}
			if fmt.Sprint(cmd.OutputFiles) != fmt.Sprint(tt.wantFiles) {
				t.Errorf("output files %v, want %v", cmd.OutputFiles, tt.wantFiles)
			}
			// A server of REAPI 2.1 or later reads only output_paths.
			if fmt.Sprint(cmd.OutputPaths) != fmt.Sprint(tt.wantFiles) {
				t.Errorf("output paths %v, want %v", cmd.OutputPaths, tt.wantFiles)
			}
			env := cmd.EnvironmentVariables
			if len(env) == 0 || env[0].Name != benchIDVar || env[0].Value != "ID" {
				t.Errorf("environment %v does not start with %s=ID", env, benchIDVar)
			}
			for i := 1; i < len(env); i++ {
				if env[i-1].Name >= env[i].Name {
					t.Errorf("environment %v is not sorted by name", env)
				}
			}
			if !proto.Equal(cmd.Platform, tt.plan.Platform) || !proto.Equal(action.Platform, tt.plan.Platform) {
				t.Errorf("platforms %v (command), %v (action), want %v on both", cmd.Platform, action.Platform, tt.plan.Platform)
			}
			if !proto.Equal(action.InputRootDigest, digest.Empty(digest.SHA256).Proto()) {
				t.Errorf("input root %v, want the empty directory", action.InputRootDigest)
			}
			// Different ids make different commands, hence different actions.
			other, _ := buildAction(&tt.plan, "ID2")
			if proto.Equal(cmd, other) {
				t.Error("two actions with different ids have the same command")
			}
		})
	}
}

func TestCheckBenchResponse(t *testing.T) {
	good := digest.Compute(digest.SHA256, []byte("ID\n")).Proto()
	empty := digest.Empty(digest.SHA256).Proto()
	withOut := func(d *repb.Digest) *repb.ExecuteResponse {
		return &repb.ExecuteResponse{Result: &repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "other", Digest: empty}, {Path: "out", Digest: d}}}}
	}
	tests := []struct {
		name       string
		resp       *repb.ExecuteResponse
		outputFile bool
		noop       bool
		wantErr    string
	}{
		{"good output", withOut(good), true, false, ""},
		{"no outputs wanted", &repb.ExecuteResponse{Result: &repb.ActionResult{}}, false, false, ""},
		{"empty output from a no-op worker", withOut(empty), true, true, ""},
		{"empty output from a real worker", withOut(empty), true, false, "the server returned the wrong output"},
		{"wrong output", withOut(digest.Compute(digest.SHA256, []byte("x")).Proto()), true, true, "wrong output"},
		{"missing output", &repb.ExecuteResponse{Result: &repb.ActionResult{}}, true, false, `no output file "out"`},
		{"exit code", &repb.ExecuteResponse{Result: &repb.ActionResult{ExitCode: 3}}, false, false, "exited with code 3"},
		{"status", &repb.ExecuteResponse{Status: &rpcstatus.Status{Code: int32(codes.Internal), Message: "worker lost"}}, false, false, "worker lost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkBenchResponse(tt.resp, tt.outputFile, "ID", tt.noop)
			if tt.wantErr == "" && err != nil {
				t.Errorf("checkBenchResponse = %v, want nil", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("checkBenchResponse = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
