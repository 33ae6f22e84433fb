package server

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
)

// nestedRoot stores an input root whose only content is a/b/c/src.txt
// and returns its digest.
func (f *farm) nestedRoot() digest.Digest {
	f.t.Helper()
	src := f.putBytes([]byte("source\n"))
	c := f.put(&repb.Directory{Files: []*repb.FileNode{{Name: "src.txt", Digest: src.Proto()}}})
	b := f.put(&repb.Directory{Directories: []*repb.DirectoryNode{{Name: "c", Digest: c.Proto()}}})
	a := f.put(&repb.Directory{Directories: []*repb.DirectoryNode{{Name: "b", Digest: b.Proto()}}})
	return f.put(&repb.Directory{Directories: []*repb.DirectoryNode{{Name: "a", Digest: a.Proto()}}})
}

// treeNames lists the files and directories at the top of an output
// directory's Tree, and the files of its subdirectories as dir/name.
func (f *farm) treeNames(od *repb.OutputDirectory) []string {
	f.t.Helper()
	tree := &repb.Tree{}
	if err := proto.Unmarshal([]byte(f.read(od.TreeDigest)), tree); err != nil {
		f.t.Fatal(err)
	}
	var names []string
	for _, fn := range tree.Root.Files {
		names = append(names, fn.Name)
	}
	for _, d := range tree.Root.Directories {
		names = append(names, d.Name+"/")
	}
	for _, ch := range tree.Children {
		for _, fn := range ch.Files {
			names = append(names, "*/"+fn.Name)
		}
	}
	slices.Sort(names)
	return names
}

// TestExecuteOutputsRelativeToTheWorkingDirectory: the outputs
// BuildStream 2 asks for, "." (the whole working directory) and a
// directory that climbs out of the working directory but stays inside
// the input root, pass Execute and the worker, and come back with what
// the command wrote there, under the paths as declared.
func TestExecuteOutputsRelativeToTheWorkingDirectory(t *testing.T) {
	f := startFarm(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := f.nestedRoot()
	script := "echo built > built.o && mkdir -p ../../../install/bin && echo tool > ../../../install/bin/tool"
	for _, tc := range []struct {
		name string
		set  func(*repb.Command)
	}{
		{"output_directories", func(c *repb.Command) { c.OutputDirectories = []string{".", "../../../install"} }},
		{"output_paths", func(c *repb.Command) { c.OutputPaths = []string{".", "../../../install"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := shCmd(script)
			cmd.WorkingDirectory = "a/b/c"
			tc.set(cmd)
			resp := f.run(ctx, root, cmd)
			if code := resp.Result.GetExitCode(); code != 0 {
				t.Fatalf("exit code %d; stderr %q", code, f.read(resp.Result.StderrDigest))
			}
			if err := client.CheckResponse(resp); err != nil {
				t.Fatal(err)
			}
			dirs := resp.Result.OutputDirectories
			if len(dirs) != 2 || dirs[0].Path != "." || dirs[1].Path != "../../../install" {
				t.Fatalf("output directories %v, want . and ../../../install", dirs)
			}
			if got := f.treeNames(dirs[0]); !slices.Equal(got, []string{"built.o", "src.txt"}) {
				t.Errorf("the working directory's tree holds %v, want the input src.txt and built.o", got)
			}
			if got := f.treeNames(dirs[1]); !slices.Equal(got, []string{"*/tool", "bin/"}) {
				t.Errorf("install's tree holds %v, want bin/tool", got)
			}
		})
	}
}

// TestExecuteRefusesAnOutputLeavingTheInputRoot: joined with the working
// directory, ../../../../x climbs above the input root; Execute refuses
// it with INVALID_ARGUMENT before anything runs, saying why.
func TestExecuteRefusesAnOutputLeavingTheInputRoot(t *testing.T) {
	f := startFarm(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, set := range []func(*repb.Command){
		func(c *repb.Command) { c.OutputDirectories = []string{"../../../../x"} },
		func(c *repb.Command) { c.OutputFiles = []string{"../../../../x"} },
		func(c *repb.Command) { c.OutputPaths = []string{"../../../../x"} },
	} {
		cmd := shCmd("echo ran > ../../../../x")
		cmd.WorkingDirectory = "a/b/c"
		set(cmd)
		ad := f.put(&repb.Action{CommandDigest: f.put(cmd).Proto(), InputRootDigest: f.nestedRoot().Proto()})
		resp, _, err := client.Execute(ctx, f.conn, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
		st, _ := status.FromError(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), `"../../../../x" leads outside the input root (from the working directory "a/b/c" it climbs to "../x")`) {
			t.Errorf("Execute = %v, %v; want INVALID_ARGUMENT saying the output leads outside the input root", resp, err)
		}
	}
}
