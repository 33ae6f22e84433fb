package server_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/client"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/server/servertest"
	"github.com/gantry-build/gantry/internal/worker/persistent"
)

// javacFarm is a server from servertest (this benchmark needs a
// testing.TB) and its CAS.
type javacFarm struct {
	tb   testing.TB
	conn *grpc.ClientConn
	cas  *client.CAS
}

func startJavacFarm(tb testing.TB) *javacFarm {
	_, conn := servertest.Start(tb)
	return &javacFarm{tb: tb, conn: conn, cas: client.NewCAS(conn, "", digest.SHA256, 0)}
}

func (f *javacFarm) put(m proto.Message) digest.Digest {
	b, _ := proto.Marshal(m)
	return f.putBytes(b)
}

func (f *javacFarm) putBytes(b []byte) digest.Digest {
	d := digest.Compute(digest.SHA256, b)
	if err := blobstore.Put(context.Background(), f.cas, d, b); err != nil {
		f.tb.Fatal(err)
	}
	return d
}

func (f *javacFarm) read(d *repb.Digest) string {
	dd, err := digest.FromProto(digest.SHA256, d)
	if err != nil {
		f.tb.Fatal(err)
	}
	b, err := blobstore.Get(context.Background(), f.cas, dd)
	if err != nil {
		f.tb.Fatal(err)
	}
	return string(b)
}

// javacCompile is one compile action.
type javacCompile struct {
	root digest.Digest
	cmd  *repb.Command
}

var (
	javacWorkerOnce  sync.Once
	javacWorkerClass []byte
	javacWorkerErr   error
)

// javacWorker compiles testdata/javacworker/JavacWorker.java (a
// persistent worker around the JDK's compiler) once per test process and
// returns its class file. Without a JDK it skips, or fails under CI=true.
func javacWorker(tb testing.TB) []byte {
	tb.Helper()
	for _, tool := range []string{"javac", "java"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				tb.Fatalf("%s is not installed; scripts/install-test-deps.sh installs it (Debian package default-jdk-headless)", tool)
			}
			tb.Skipf("%s is not installed (Debian package default-jdk-headless); skipping the persistent javac worker", tool)
		}
	}
	javacWorkerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "javacworker-")
		if err != nil {
			javacWorkerErr = err
			return
		}
		defer os.RemoveAll(dir)
		if b, err := exec.Command("javac", "-d", dir, "testdata/javacworker/JavacWorker.java").CombinedOutput(); err != nil {
			javacWorkerErr = fmt.Errorf("javac JavacWorker.java: %v\n%s", err, b)
			return
		}
		javacWorkerClass, javacWorkerErr = os.ReadFile(filepath.Join(dir, "JavacWorker.class"))
	})
	if javacWorkerErr != nil {
		tb.Fatal(javacWorkerErr)
	}
	return javacWorkerClass
}

// javaSource is a small class for compile n of a run (salt keeps runs
// apart in the ActionCache).
func javaSource(n int, salt string) string {
	return fmt.Sprintf(`package p%d;

import java.util.*;

/** Compile %d of run %s. */
public final class A%d {
  public static List<Integer> f(Map<String, Integer> m) {
    List<Integer> out = new ArrayList<>();
    for (Map.Entry<String, Integer> e : m.entrySet()) {
      out.add(e.getValue() * %d + e.getKey().length());
    }
    Collections.sort(out);
    return out;
  }
}
`, n, n, salt, n, n)
}

// javacAction is compile n as Bazel 6+ sends it to a remote persistent
// worker: java -cp tools JavacWorker @bazel-out/params/n.params, the
// worker's class a tool input; key "" leaves the persistentWorkerKey
// out (a cold JVM per action).
func (f *javacFarm) javacAction(tb testing.TB, n int, salt, key string) javacCompile {
	class := f.putBytes(javacWorker(tb))
	src := f.putBytes([]byte(javaSource(n, salt)))
	out := fmt.Sprintf("bazel-out/bin/%d", n)
	params := f.putBytes([]byte(fmt.Sprintf("-d\n%s\nsrc/A%d.java\n", out, n)))
	toolDir := f.put(&repb.Directory{Files: []*repb.FileNode{{Name: "JavacWorker.class", Digest: class.Proto(),
		NodeProperties: &repb.NodeProperties{Properties: []*repb.NodeProperty{{Name: "bazel_tool_input"}}}}}})
	srcDir := f.put(&repb.Directory{Files: []*repb.FileNode{{Name: fmt.Sprintf("A%d.java", n), Digest: src.Proto()}}})
	paramsDir := f.put(&repb.Directory{Files: []*repb.FileNode{{Name: fmt.Sprintf("%d.params", n), Digest: params.Proto()}}})
	outDir := f.put(&repb.Directory{Directories: []*repb.DirectoryNode{{Name: "params", Digest: paramsDir.Proto()}}})
	root := f.put(&repb.Directory{Directories: []*repb.DirectoryNode{
		{Name: "bazel-out", Digest: outDir.Proto()}, {Name: "src", Digest: srcDir.Proto()}, {Name: "tools", Digest: toolDir.Proto()}}})
	plat := &repb.Platform{}
	if key != "" {
		plat.Properties = []*repb.Platform_Property{{Name: "persistentWorkerKey", Value: key}}
	}
	cmd := &repb.Command{
		Arguments:   []string{"/usr/bin/java", "-cp", "tools", "JavacWorker", fmt.Sprintf("@bazel-out/params/%d.params", n)},
		OutputPaths: []string{out},
		Platform:    plat,
	}
	return javacCompile{root: root, cmd: cmd}
}

// runJavac runs a and checks that it compiled class n.
func (f *javacFarm) runJavac(ctx context.Context, tb testing.TB, a javacCompile, n int) {
	ad := f.put(&repb.Action{CommandDigest: f.put(a.cmd).Proto(), InputRootDigest: a.root.Proto(), Platform: a.cmd.Platform})
	resp, _, err := client.Execute(ctx, f.conn, &repb.ExecuteRequest{ActionDigest: ad.Proto()})
	if err != nil {
		tb.Fatal(err)
	}
	if err := client.CheckResponse(resp); err != nil {
		tb.Fatal(err)
	}
	if resp.Result.ExitCode != 0 {
		tb.Fatalf("javac exited %d: %s", resp.Result.ExitCode, f.read(resp.Result.StderrDigest))
	}
	if len(resp.Result.OutputDirectories) != 1 {
		tb.Fatalf("outputs %v, want the class directory", resp.Result.OutputDirectories)
	}
	tree := &repb.Tree{}
	if err := proto.Unmarshal([]byte(f.read(resp.Result.OutputDirectories[0].TreeDigest)), tree); err != nil {
		tb.Fatal(err)
	}
	want := fmt.Sprintf("A%d.class", n)
	if len(tree.Children) != 1 || len(tree.Children[0].Files) != 1 || tree.Children[0].Files[0].Name != want {
		tb.Fatalf("class tree %v, want p%d/%s", tree, n, want)
	}
}

// TestPersistentJavac compiles Java remotely on one warm JVM.
func TestPersistentJavac(t *testing.T) {
	javacWorker(t)
	f := startJavacFarm(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	salt := fmt.Sprint(time.Now().UnixNano())
	for n := range 4 {
		f.runJavac(ctx, t, f.javacAction(t, n, salt, "javac"), n)
	}
}

// BenchmarkJavac compiles one small class per iteration, one at a time:
// local-cold starts a JVM per compile as a plain process, local-warm
// sends requests to one persistent JVM (Bazel's local persistent
// worker), remote-cold and remote-warm run the same Bazel-shaped action
// through the server's REAPI without and with persistentWorkerKey.
// docs/PERFORMANCE.md records a run.
func BenchmarkJavac(b *testing.B) {
	class := javacWorker(b)
	salt := fmt.Sprint(time.Now().UnixNano())
	local := func(b *testing.B) string {
		dir := b.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "JavacWorker.class"), class, 0o644); err != nil {
			b.Fatal(err)
		}
		return dir
	}
	writeLocal := func(b *testing.B, dir string, n int) []string {
		src := filepath.Join(dir, fmt.Sprintf("A%d.java", n))
		if err := os.WriteFile(src, []byte(javaSource(n, salt)), 0o644); err != nil {
			b.Fatal(err)
		}
		return []string{"-d", filepath.Join(dir, "out"), src}
	}
	b.Run("local-cold", func(b *testing.B) {
		dir := local(b)
		for i := 0; b.Loop(); i++ {
			params := filepath.Join(dir, "params")
			os.WriteFile(params, []byte(strings.Join(writeLocal(b, dir, i), "\n")+"\n"), 0o644)
			if out, err := exec.Command("java", "-cp", dir, "JavacWorker", "@"+params).CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
	})
	b.Run("local-warm", func(b *testing.B) {
		dir := local(b)
		cmd := exec.Command("java", "-cp", dir, "JavacWorker", "--persistent_worker")
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { stdin.Close(); cmd.Wait() }()
		rd := persistent.NewReader(stdout, persistent.Proto)
		compile := func(n int) {
			req, _ := persistent.AppendRequest(nil, persistent.Proto, &persistent.Request{Arguments: writeLocal(b, dir, n)})
			if _, err := stdin.Write(req); err != nil {
				b.Fatal(err)
			}
			r, err := rd.ReadResponse()
			if err != nil || r.ExitCode != 0 {
				b.Fatalf("%+v, %v", r, err)
			}
		}
		compile(1_000_000) // start the JVM: warm is the steady state
		for i := 0; b.Loop(); i++ {
			compile(i)
		}
	})
	for _, mode := range []string{"remote-cold", "remote-warm"} {
		b.Run(mode, func(b *testing.B) {
			f := startJavacFarm(b)
			ctx := context.Background()
			key := ""
			if mode == "remote-warm" {
				key = "javac"
				f.runJavac(ctx, b, f.javacAction(b, 100000, salt, key), 100000)
			}
			for i := 0; b.Loop(); i++ {
				a := f.javacAction(b, i, salt+mode, key)
				f.runJavac(ctx, b, a, i)
			}
		})
	}
}
