package cc

import (
	"bytes"
	"context"
	"os"
	"os/exec"
)

// depsResult is what the local dependency listing found.
type depsResult struct {
	// Listed are the dependencies as the compiler names them (relative to
	// the working directory or absolute), the source first.
	Listed []string
	// Infos are os.Stat of the listed files, by their name in Listed,
	// when the include scanner found them (nil from a listing).
	Infos map[string]os.FileInfo
	// DepFile is the dependency file the user asked for with -MD/-MMD,
	// byte for byte what the compiler would write; nil without -MD.
	DepFile []byte
}

// listingArgs are the arguments of a dependency listing: the user's
// without the compile, output and dependency-file flags, then mode ("-M"
// or "-MM"), which writes the rule on stdout. With user set, the user's targets (-MT/-MQ, or -MQ
// of the -o file as gcc's -MD does) and -MP follow, so that the file is the
// one -MD would write; otherwise a fixed target.
func (c *Compile) listingArgs(mode string, user bool) []string {
	var out []string
	for _, it := range c.items {
		switch it.spec.kind {
		case kindCompile, kindOutput, kindDepMD, kindDepMF, kindDepMT, kindDepMP:
			if !it.source {
				continue
			}
		}
		out = append(out, it.raw...)
	}
	out = append(out, mode)
	switch {
	case !user:
		out = append(out, "-MT", "x")
	case len(c.depTargets) > 0:
		out = append(out, c.depTargets...)
	case c.explicitOutput:
		out = append(out, "-MQ", c.Output)
	}
	if user && c.depPhony {
		out = append(out, "-MP")
	}
	return out
}

// listDeps runs the compiler's own dependency listing locally. A failing
// listing (a missing header, a syntax error the preprocessor sees) makes
// the compile run locally, where the compiler reports it itself.
func (c *Compile) listDeps(ctx context.Context, env []string) (*depsResult, error) {
	// The rule comes on stdout: no temporary file to create, read and
	// remove for every compile.
	run := func(args []string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, c.Compiler, args...)
		cmd.Dir, cmd.Env = c.Cwd, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return nil, local("the dependency listing failed (%v): %s", err, firstLine(stderr.String()))
		}
		return stdout.Bytes(), nil
	}
	res := &depsResult{}
	data, err := run(c.listingArgs("-M", c.depMode == "-MD"))
	if err != nil {
		return nil, err
	}
	if c.depMode == "-MD" {
		res.DepFile = data
	}
	if res.Listed, err = parseMakeDeps(data); err != nil {
		return nil, local("%v", err)
	}
	if c.depMode == "-MMD" {
		// The user's file lists the project's headers only; a second
		// listing writes it exactly as the compiler would.
		if res.DepFile, err = run(c.listingArgs("-MM", true)); err != nil {
			return nil, err
		}
	}
	if len(res.Listed) == 0 {
		return nil, local("the dependency listing is empty")
	}
	return res, nil
}
