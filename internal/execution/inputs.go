package execution

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gantry-build/gantry/internal/blobstore"
	"github.com/gantry-build/gantry/internal/digest"
	"github.com/gantry-build/gantry/internal/inputtree"
)

// missingError builds the FAILED_PRECONDITION status clients act on: one
// MISSING violation per blob, subject "blobs/{hash}/{size}".
func missingError(ds []digest.Digest, what string) error {
	pf := &errdetails.PreconditionFailure{}
	for _, d := range ds {
		pf.Violations = append(pf.Violations, &errdetails.PreconditionFailure_Violation{
			Type: "MISSING", Subject: "blobs/" + d.ResourceSegment(), Description: what + " is not in the CAS",
		})
	}
	st := status.New(codes.FailedPrecondition, fmt.Sprintf("%d blob(s) needed by the action are missing from the CAS (first: %s); upload them and retry", len(ds), ds[0]))
	if withDetails, err := st.WithDetails(pf); err == nil {
		st = withDetails
	}
	return st.Err()
}

// readProto reads a message from the CAS; a missing blob is a MISSING
// precondition failure.
func readProto(ctx context.Context, cas blobstore.Store, d digest.Digest, m proto.Message, what string) ([]byte, error) {
	data, err := blobstore.Get(ctx, cas, d)
	if errors.Is(err, blobstore.ErrNotFound) {
		return nil, missingError([]digest.Digest{d}, what)
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reading %s %s: %v", what, d, err)
	}
	if err := proto.Unmarshal(data, m); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s %s is not a valid %s message: %v", what, d, m.ProtoReflect().Descriptor().Name(), err)
	}
	return data, nil
}

// validName checks one path component of an input tree.
func validName(name string) error {
	switch {
	case name == "":
		return errors.New("empty name")
	case name == "." || name == "..":
		return fmt.Errorf("name %q is not allowed", name)
	case strings.Contains(name, "/"):
		return fmt.Errorf("name %q contains '/'", name)
	case strings.ContainsRune(name, 0):
		return fmt.Errorf("name %q contains a NUL byte", name)
	}
	return inputtree.CheckNameLength(name)
}

// ValidateDirectory checks one Directory of an input tree: valid names,
// each list sorted, no name used twice, symlinks that stay inside the input
// root. dirPath is the directory's path from the root, for messages and
// symlink checks.
func ValidateDirectory(dir *repb.Directory, dirPath string) error {
	return validateDirectory(dir, dirPath, checkSymlinkTarget)
}

// validateDirectory is ValidateDirectory with checkTarget deciding which
// symlink targets are allowed (chroot.go).
func validateDirectory(dir *repb.Directory, dirPath string, checkTarget func(linkPath, target string) error) error {
	seen := map[string]string{}
	check := func(kind, name, prev string) error {
		if err := validName(name); err != nil {
			return fmt.Errorf("%s in %q: %v", kind, displayDir(dirPath), err)
		}
		if prev != "" && name <= prev {
			return fmt.Errorf("%ss in %q are not sorted by name (%q after %q); entries must be sorted and unique", kind, displayDir(dirPath), name, prev)
		}
		if other, dup := seen[name]; dup {
			return fmt.Errorf("%q in %q appears twice (as a %s and a %s)", name, displayDir(dirPath), other, kind)
		}
		seen[name] = kind
		return nil
	}
	prev := ""
	for _, f := range dir.Files {
		if err := check("file", f.Name, prev); err != nil {
			return err
		}
		prev = f.Name
	}
	prev = ""
	for _, d := range dir.Directories {
		if err := check("directory", d.Name, prev); err != nil {
			return err
		}
		prev = d.Name
	}
	prev = ""
	for _, l := range dir.Symlinks {
		if err := check("symlink", l.Name, prev); err != nil {
			return err
		}
		prev = l.Name
		if err := checkTarget(path.Join(dirPath, l.Name), l.Target); err != nil {
			return err
		}
	}
	return nil
}

func displayDir(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// checkSymlinkTarget rejects absolute targets (Gantry announces the
// DISALLOWED strategy) and relative ones that climb out of the input root.
func checkSymlinkTarget(linkPath, target string) error {
	if target == "" {
		return fmt.Errorf("symlink %q has an empty target", linkPath)
	}
	if path.IsAbs(target) {
		return fmt.Errorf("symlink %q points to the absolute path %q; this instance only allows relative symlink targets inside the input root (absolute ones only where actions run with the input root as /: an instance listed in scheduler.chroot_instances)", linkPath, target)
	}
	joined := path.Join(path.Dir(linkPath), target)
	if joined == ".." || strings.HasPrefix(joined, "../") {
		return fmt.Errorf("symlink %q points to %q, outside the input root", linkPath, target)
	}
	return nil
}

// inputWalk validates a whole input tree and lists the blobs it needs.
type inputWalk struct {
	cas     blobstore.Store
	mu      sync.Mutex
	seen    map[seenKey]bool
	files   map[digest.Digest]bool
	missing []digest.Digest
	err     error
	// checkTarget decides which symlink targets are allowed.
	checkTarget func(linkPath, target string) error
}

// checkInputRoot walks the tree under root, validating every directory,
// and fails with MISSING violations for every blob not in the CAS. chroot
// says the action runs with its input root as "/", where symlinks may
// have any target (chroot.go).
func checkInputRoot(ctx context.Context, cas blobstore.Store, root digest.Digest, chroot bool) error {
	if root.IsEmpty() {
		return nil // the empty directory: nothing to fetch, nothing to check
	}
	w := &inputWalk{cas: cas, seen: map[seenKey]bool{}, files: map[digest.Digest]bool{}, checkTarget: checkSymlinkTarget}
	if chroot {
		w.checkTarget = checkChrootSymlinkTarget
	}
	w.walk(ctx, root, "")
	if w.err != nil {
		return w.err
	}
	ds := make([]digest.Digest, 0, len(w.files))
	for d := range w.files {
		ds = append(ds, d)
	}
	missing, err := cas.FindMissing(ctx, ds)
	if err != nil {
		return status.Errorf(codes.Internal, "checking inputs: %v", err)
	}
	missing = append(w.missing, missing...)
	if len(missing) > 0 {
		return missingError(missing, "input")
	}
	return nil
}

// MaxInputDepth bounds how deeply an input tree's directories nest (the
// workers and the Remote Asset unpacker refuse deeper trees too).
var MaxInputDepth = inputtree.MaxDepth

// seenKey identifies a visited directory. Whether a relative symlink
// escapes the root depends on the depth the directory sits at, so the same
// digest is checked once per depth.
type seenKey struct {
	d     digest.Digest
	depth int
}

func depth(p string) int {
	if p == "" {
		return 0
	}
	return strings.Count(p, "/") + 1
}

func (w *inputWalk) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

// walk visits a directory and its children, level by level, reading each
// level's directories in parallel.
func (w *inputWalk) walk(ctx context.Context, root digest.Digest, rootPath string) {
	type node struct {
		d    digest.Digest
		path string
	}
	level := []node{{root, rootPath}}
	w.seen[seenKey{root, depth(rootPath)}] = true
	for n := 0; len(level) > 0 && w.err == nil; n++ {
		if n > MaxInputDepth {
			w.fail(status.Errorf(codes.InvalidArgument, "input tree: directories nest more than %d deep (at %q); flatten the inputs", MaxInputDepth, level[0].path))
			return
		}
		next := make([][]node, len(level))
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i, n := range level {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				dir := &repb.Directory{}
				if n.d.IsEmpty() {
					return
				}
				if _, err := readProto(ctx, w.cas, n.d, dir, "input directory"); err != nil {
					if status.Code(err) == codes.FailedPrecondition {
						w.mu.Lock()
						w.missing = append(w.missing, n.d)
						w.mu.Unlock()
						return
					}
					w.fail(err)
					return
				}
				if err := validateDirectory(dir, n.path, w.checkTarget); err != nil {
					w.fail(status.Errorf(codes.InvalidArgument, "input tree: %v", err))
					return
				}
				w.mu.Lock()
				defer w.mu.Unlock()
				for _, f := range dir.Files {
					fd, err := digest.FromProto(root.Function, f.Digest)
					if err != nil {
						w.err = status.Errorf(codes.InvalidArgument, "input tree: file %q: %v", path.Join(n.path, f.Name), err)
						return
					}
					if !fd.IsEmpty() {
						w.files[fd] = true
					}
				}
				for _, sub := range dir.Directories {
					sd, err := digest.FromProto(root.Function, sub.Digest)
					if err != nil {
						w.err = status.Errorf(codes.InvalidArgument, "input tree: directory %q: %v", path.Join(n.path, sub.Name), err)
						return
					}
					sp := path.Join(n.path, sub.Name)
					if k := (seenKey{sd, depth(sp)}); !w.seen[k] {
						w.seen[k] = true
						next[i] = append(next[i], node{sd, sp})
					}
				}
			}()
		}
		wg.Wait()
		level = level[:0]
		for _, ns := range next {
			level = append(level, ns...)
		}
	}
}
