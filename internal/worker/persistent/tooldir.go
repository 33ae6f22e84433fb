package persistent

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// layOut makes a tool directory from the tool inputs (paths relative to
// execRoot): each is hardlinked (or copied, across file systems), so the
// directory outlives the exec root it was laid out from.
func layOut(toolDir, execRoot string, tools []string) error {
	if err := os.MkdirAll(toolDir, 0o755); err != nil {
		return err
	}
	for _, t := range tools {
		if !filepath.IsLocal(t) {
			return fmt.Errorf("tool input %q is not a path inside the input root", t)
		}
		src, dst := filepath.Join(execRoot, t), filepath.Join(toolDir, t)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.Link(src, dst); err != nil {
			if err := copyFile(src, dst); err != nil {
				return fmt.Errorf("laying out tool input %s: %w", t, err)
			}
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, info.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
