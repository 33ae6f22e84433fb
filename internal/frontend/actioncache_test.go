package frontend

import (
	"bytes"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/digest"
)

func (e *env) update(t *testing.T, instance string, ad digest.Digest, ar *repb.ActionResult) *repb.ActionResult {
	t.Helper()
	got, err := e.acc.UpdateActionResult(testCtx(t), &repb.UpdateActionResultRequest{
		InstanceName: instance, ActionDigest: ad.Proto(), ActionResult: ar, DigestFunction: ad.Function,
	})
	if err != nil {
		t.Fatalf("UpdateActionResult(%q, %s): %v", instance, ad, err)
	}
	return got
}

func TestActionCacheInstanceScoping(t *testing.T) {
	e := newEnv(t, nil, defaultOptions())
	ad := digest.Compute(digest.SHA256, []byte("action"))
	results := map[string]*repb.ActionResult{
		"":         {ExitCode: 0},
		"team-a":   {ExitCode: 1},
		"team-a/x": {ExitCode: 2},
	}
	for inst, ar := range results {
		e.update(t, inst, ad, ar)
	}
	for inst, want := range results {
		got, err := e.acc.GetActionResult(testCtx(t), &repb.GetActionResultRequest{InstanceName: inst, ActionDigest: ad.Proto()})
		if err != nil {
			t.Fatalf("GetActionResult(%q): %v", inst, err)
		}
		if got.ExitCode != want.ExitCode {
			t.Errorf("instance %q: exit code %d, want %d", inst, got.ExitCode, want.ExitCode)
		}
	}
	_, err := e.acc.GetActionResult(testCtx(t), &repb.GetActionResultRequest{InstanceName: "team-b", ActionDigest: ad.Proto()})
	wantCode(t, err, codes.NotFound, "no cached result")
	// The same hash under BLAKE3 is another action.
	b3 := digest.Digest{Function: digest.BLAKE3, Hash: ad.Hash, Size: ad.Size}
	_, err = e.acc.GetActionResult(testCtx(t), &repb.GetActionResultRequest{ActionDigest: b3.Proto(), DigestFunction: digest.BLAKE3})
	wantCode(t, err, codes.NotFound, "")
}

func TestActionCacheCompleteness(t *testing.T) {
	type fixture struct {
		e       *env
		present digest.Digest // a blob in the CAS
		absent  digest.Digest // a blob not in the CAS
		tree    func(files ...digest.Digest) digest.Digest
	}
	setup := func(t *testing.T, opts Options) fixture {
		e := newEnv(t, nil, opts)
		f := fixture{
			e:       e,
			present: e.put(t, digest.SHA256, []byte("present output")),
			absent:  digest.Compute(digest.SHA256, []byte("absent output")),
		}
		f.tree = func(files ...digest.Digest) digest.Digest {
			child := &repb.Directory{}
			for i, d := range files {
				child.Files = append(child.Files, &repb.FileNode{Name: string(rune('a' + i)), Digest: d.Proto()})
			}
			childData, _ := proto.Marshal(child)
			tr := &repb.Tree{
				Root:     &repb.Directory{Directories: []*repb.DirectoryNode{{Name: "sub", Digest: digest.Compute(digest.SHA256, childData).Proto()}}},
				Children: []*repb.Directory{child},
			}
			data, _ := proto.Marshal(tr)
			return e.put(t, digest.SHA256, data)
		}
		return f
	}
	tests := []struct {
		name  string
		check bool
		ar    func(f fixture) *repb.ActionResult
		code  codes.Code
	}{
		{"all present", true, func(f fixture) *repb.ActionResult {
			return &repb.ActionResult{
				StdoutDigest:      f.present.Proto(),
				StderrDigest:      digest.Empty(digest.SHA256).Proto(),
				OutputFiles:       []*repb.OutputFile{{Path: "out", Digest: f.present.Proto()}},
				OutputDirectories: []*repb.OutputDirectory{{Path: "dir", TreeDigest: f.tree(f.present).Proto()}},
			}
		}, codes.OK},
		{"missing stdout", true, func(f fixture) *repb.ActionResult {
			return &repb.ActionResult{StdoutDigest: f.absent.Proto()}
		}, codes.NotFound},
		{"missing stderr", true, func(f fixture) *repb.ActionResult {
			return &repb.ActionResult{StderrDigest: f.absent.Proto()}
		}, codes.NotFound},
		{"missing output file", true, func(f fixture) *repb.ActionResult {
			return &repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "a", Digest: f.present.Proto()}, {Path: "b", Digest: f.absent.Proto()}}}
		}, codes.NotFound},
		{"missing tree", true, func(f fixture) *repb.ActionResult {
			return &repb.ActionResult{OutputDirectories: []*repb.OutputDirectory{{Path: "d", TreeDigest: f.absent.Proto()}}}
		}, codes.NotFound},
		{"tree with a missing file", true, func(f fixture) *repb.ActionResult {
			return &repb.ActionResult{OutputDirectories: []*repb.OutputDirectory{{Path: "d", TreeDigest: f.tree(f.present, f.absent).Proto()}}}
		}, codes.NotFound},
		{"check disabled", false, func(f fixture) *repb.ActionResult {
			return &repb.ActionResult{StdoutDigest: f.absent.Proto()}
		}, codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := defaultOptions()
			opts.CompletenessCheck = tt.check
			f := setup(t, opts)
			ad := digest.Compute(digest.SHA256, []byte(tt.name))
			f.e.update(t, "", ad, tt.ar(f))
			_, err := f.e.acc.GetActionResult(testCtx(t), &repb.GetActionResultRequest{ActionDigest: ad.Proto()})
			if tt.code == codes.OK {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantCode(t, err, tt.code, "no longer in the CAS")
			if tt.name == "missing tree" {
				return // the absent blob is not a Tree: uploading it does not help
			}
			// Uploading the missing blob makes the entry whole again.
			f.e.put(t, digest.SHA256, []byte("absent output"))
			if _, err := f.e.acc.GetActionResult(testCtx(t), &repb.GetActionResultRequest{ActionDigest: ad.Proto()}); err != nil {
				t.Errorf("after uploading the missing blob: %v", err)
			}
		})
	}
}

func TestActionCacheInline(t *testing.T) {
	opts := defaultOptions()
	opts.InlineLimit = 100
	e := newEnv(t, nil, opts)
	stdout := []byte("standard output")
	stderr := []byte("standard error")
	fileA := []byte("contents of a")
	fileB := []byte("contents of b")
	big := bytes.Repeat([]byte("x"), 200) // over the inline limit
	ar := &repb.ActionResult{
		StdoutDigest: e.put(t, digest.SHA256, stdout).Proto(),
		StderrDigest: e.put(t, digest.SHA256, stderr).Proto(),
		OutputFiles: []*repb.OutputFile{
			{Path: "a", Digest: e.put(t, digest.SHA256, fileA).Proto()},
			{Path: "b", Digest: e.put(t, digest.SHA256, fileB).Proto()},
			{Path: "big", Digest: e.put(t, digest.SHA256, big).Proto()},
		},
	}
	ad := digest.Compute(digest.SHA256, []byte("inline action"))
	e.update(t, "", ad, ar)

	tests := []struct {
		name                   string
		stdout, stderr         bool
		files                  []string
		wantStdout, wantStderr []byte
		wantFiles              map[string][]byte
	}{
		{"nothing", false, false, nil, nil, nil, nil},
		{"stdout", true, false, nil, stdout, nil, nil},
		{"stderr", false, true, nil, nil, stderr, nil},
		{"one file", false, false, []string{"b"}, nil, nil, map[string][]byte{"b": fileB}},
		{"unknown file", false, false, []string{"zzz"}, nil, nil, nil},
		{"over the limit", false, false, []string{"big"}, nil, nil, nil},
		{"everything", true, true, []string{"a", "b", "big"}, stdout, stderr, map[string][]byte{"a": fileA, "b": fileB}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.acc.GetActionResult(testCtx(t), &repb.GetActionResultRequest{
				ActionDigest: ad.Proto(), InlineStdout: tt.stdout, InlineStderr: tt.stderr, InlineOutputFiles: tt.files,
			})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.StdoutRaw, tt.wantStdout) {
				t.Errorf("stdout_raw = %q, want %q", got.StdoutRaw, tt.wantStdout)
			}
			if !bytes.Equal(got.StderrRaw, tt.wantStderr) {
				t.Errorf("stderr_raw = %q, want %q", got.StderrRaw, tt.wantStderr)
			}
			for _, f := range got.OutputFiles {
				if !bytes.Equal(f.Contents, tt.wantFiles[f.Path]) {
					t.Errorf("output file %s contents = %q, want %q", f.Path, f.Contents, tt.wantFiles[f.Path])
				}
				if f.Digest == nil {
					t.Errorf("output file %s lost its digest", f.Path)
				}
			}
			if got.StdoutDigest == nil || got.StderrDigest == nil {
				t.Error("inlining dropped a digest")
			}
		})
	}
}

func TestUpdateActionResultMovesInlineData(t *testing.T) {
	for _, fn := range []digest.Function{digest.SHA256, digest.BLAKE3} {
		t.Run(digest.Name(fn), func(t *testing.T) {
			e := newEnv(t, nil, defaultOptions())
			stdout := []byte("inline stdout")
			stderr := []byte("inline stderr")
			contents := []byte("inline file")
			ad := digest.Compute(fn, []byte("action with inline data"))
			got := e.update(t, "i", ad, &repb.ActionResult{
				StdoutRaw: stdout,
				StderrRaw: stderr,
				OutputFiles: []*repb.OutputFile{
					{Path: "with digest", Contents: contents, Digest: digest.Compute(fn, contents).Proto()},
					{Path: "without digest", Contents: contents},
				},
			})
			if len(got.StdoutRaw) != 0 || len(got.StderrRaw) != 0 || len(got.OutputFiles[0].Contents) != 0 {
				t.Error("the stored result still holds inline data")
			}
			for _, c := range []struct {
				p    *repb.Digest
				data []byte
			}{{got.StdoutDigest, stdout}, {got.StderrDigest, stderr}, {got.OutputFiles[0].Digest, contents}, {got.OutputFiles[1].Digest, contents}} {
				want := digest.Compute(fn, c.data)
				if c.p.GetHash() != want.Hash || c.p.GetSizeBytes() != want.Size {
					t.Errorf("digest %v, want %s", c.p, want)
				}
				if !e.has(t, want) {
					t.Errorf("inline data %q was not moved into the CAS as %s", c.data, want)
				}
			}
			// The stored entry passes the completeness check and can be
			// inlined again.
			ar, err := e.acc.GetActionResult(testCtx(t), &repb.GetActionResultRequest{
				InstanceName: "i", ActionDigest: ad.Proto(), DigestFunction: fn, InlineStdout: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(ar.StdoutRaw, stdout) {
				t.Errorf("stdout_raw = %q, want %q", ar.StdoutRaw, stdout)
			}
		})
	}
}

func TestUpdateActionResultErrors(t *testing.T) {
	e := newEnv(t, nil, defaultOptions())
	ad := digest.Compute(digest.SHA256, []byte("action")).Proto()
	good := digest.Compute(digest.SHA256, []byte("x")).Proto()
	tests := []struct {
		name string
		req  *repb.UpdateActionResultRequest
		msg  string
	}{
		{"no result", &repb.UpdateActionResultRequest{ActionDigest: ad}, "action_result is missing"},
		{"no action digest", &repb.UpdateActionResultRequest{ActionResult: &repb.ActionResult{}}, "action_digest"},
		{"bad action digest", &repb.UpdateActionResultRequest{ActionDigest: &repb.Digest{Hash: "x"}, ActionResult: &repb.ActionResult{}}, "action_digest"},
		{"reserved instance", &repb.UpdateActionResultRequest{InstanceName: "blobs", ActionDigest: ad, ActionResult: &repb.ActionResult{}}, "reserved"},
		{"unsupported function", &repb.UpdateActionResultRequest{DigestFunction: repb.DigestFunction_VSO, ActionDigest: ad, ActionResult: &repb.ActionResult{}}, "not supported"},
		{"inline data does not match digest", &repb.UpdateActionResultRequest{ActionDigest: ad, ActionResult: &repb.ActionResult{StdoutRaw: []byte("y"), StdoutDigest: good}}, "do not match"},
		{"bad stdout digest", &repb.UpdateActionResultRequest{ActionDigest: ad, ActionResult: &repb.ActionResult{StdoutDigest: &repb.Digest{Hash: "Z", SizeBytes: 1}}}, "stdout_digest"},
		{"output file without path", &repb.UpdateActionResultRequest{ActionDigest: ad, ActionResult: &repb.ActionResult{OutputFiles: []*repb.OutputFile{{Digest: good}}}}, "path is empty"},
		{"output file without digest", &repb.UpdateActionResultRequest{ActionDigest: ad, ActionResult: &repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "p"}}}}, "digest is missing"},
		{"bad tree digest", &repb.UpdateActionResultRequest{ActionDigest: ad, ActionResult: &repb.ActionResult{OutputDirectories: []*repb.OutputDirectory{{Path: "d", TreeDigest: &repb.Digest{Hash: "q"}}}}}, "tree_digest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.acc.UpdateActionResult(testCtx(t), tt.req)
			wantCode(t, err, codes.InvalidArgument, tt.msg)
		})
	}
	// Nothing was cached by the failed updates.
	_, err := e.acc.GetActionResult(testCtx(t), &repb.GetActionResultRequest{ActionDigest: ad})
	wantCode(t, err, codes.NotFound, "")
}

func TestGetActionResultErrors(t *testing.T) {
	e := newEnv(t, nil, defaultOptions())
	tests := []struct {
		name string
		req  *repb.GetActionResultRequest
		code codes.Code
	}{
		{"no digest", &repb.GetActionResultRequest{}, codes.InvalidArgument},
		{"bad digest", &repb.GetActionResultRequest{ActionDigest: &repb.Digest{Hash: "x", SizeBytes: 1}}, codes.InvalidArgument},
		{"bad instance", &repb.GetActionResultRequest{InstanceName: "a//b", ActionDigest: digest.Compute(digest.SHA256, nil).Proto()}, codes.InvalidArgument},
		{"unknown action", &repb.GetActionResultRequest{ActionDigest: digest.Compute(digest.SHA256, []byte("never")).Proto()}, codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.acc.GetActionResult(testCtx(t), tt.req)
			wantCode(t, err, tt.code, "")
		})
	}
}

// TestStoreActionResult covers the entry point workers' results take: it
// validates like UpdateActionResult and moves inline data into the CAS.
func TestStoreActionResult(t *testing.T) {
	e := newEnv(t, nil, defaultOptions())
	ad := digest.Compute(digest.SHA256, []byte("worker action"))
	stdout := []byte("worker stdout")
	if err := e.srv.StoreActionResult(testCtx(t), "pool", ad, &repb.ActionResult{ExitCode: 3, StdoutRaw: stdout}); err != nil {
		t.Fatal(err)
	}
	if !e.has(t, digest.Compute(digest.SHA256, stdout)) {
		t.Error("inline stdout was not moved into the CAS")
	}
	got, err := e.acc.GetActionResult(testCtx(t), &repb.GetActionResultRequest{InstanceName: "pool", ActionDigest: ad.Proto(), InlineStdout: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.ExitCode != 3 || !bytes.Equal(got.StdoutRaw, stdout) {
		t.Errorf("stored result: exit %d, stdout %q", got.ExitCode, got.StdoutRaw)
	}

	bad := digest.Compute(digest.SHA256, []byte("bad worker action"))
	err = e.srv.StoreActionResult(testCtx(t), "pool", bad, &repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "", Digest: ad.Proto()}}})
	wantCode(t, err, codes.InvalidArgument, "path is empty")
	_, err = e.acc.GetActionResult(testCtx(t), &repb.GetActionResultRequest{InstanceName: "pool", ActionDigest: bad.Proto()})
	wantCode(t, err, codes.NotFound, "")
}
