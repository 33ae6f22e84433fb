package execroot

import (
	"fmt"
	"os"
	"strings"
)

// An exec root for sandbox mode chroot (Linking.Chroot) is the action's
// "/": a symlink's absolute target means that path in the input root,
// and ".." at the root stays there, as the kernel resolves them inside a
// chroot. Build then accepts absolute targets (checkDir) and resolves
// paths that way (resolve), so nothing in such a tree leads outside it.
//
// On the host the same symlinks would lead anywhere, so the worker must
// never follow them there: files and symlinks are placed in directories
// Build made itself, and the output parents are made through an os.Root
// (outputParents), which refuses a path through an absolute symlink or
// above the root instead of following it: an output whose directory is
// not in the input tree and is named that way is refused.

// outputParents creates the directories leading up to each output (see
// createOutputParents); in chroot mode without following a symlink out
// of the root on the host. There a parent that is a directory of the
// input tree (tree is its root) is there already, however the path
// reaches it; only the others are made.
func (b *builder) outputParents(tree *dirInfo, root, wd string, outs []string) error {
	if !b.chroot {
		return createOutputParents(root, wd, outs)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, o := range outs {
		rel := joinRel(wd, o)
		i := strings.LastIndexByte(rel, '/')
		if o == "" || i < 0 || b.resolve([]*dirInfo{tree}, rel[:i]).kind == kindDir {
			continue
		}
		err := r.MkdirAll(rel[:i], 0o755)
		switch {
		case err == nil:
		case !strings.Contains(err.Error(), "escapes"): // os.Root's error has no sentinel
			return fmt.Errorf("execroot: creating the directory of output %q: %w", o, err)
		default:
			return invalidf(o, "the output's directory cannot be made inside the input root (%v): in chroot mode the worker makes it only through directories and relative symlinks that stay inside; name the output without a symlink to an absolute path or a \"..\" above the root", err)
		}
	}
	return nil
}
