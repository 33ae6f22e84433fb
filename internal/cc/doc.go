// Package cc is the compiler launcher behind `gantry cc COMPILER ARGS...`:
// it turns a gcc or clang command line into a remote.Spec when it is a
// plain compile (-c, one source, known flags) and says why not otherwise.
//
// The steps, each usable on its own by a batch runner:
//
//   - Parse classifies the command line. Anything but a plain compile
//     (linking, -E, -S, -M/-MM, stdin, several sources, response files,
//     flags not in the table of known flags) returns a *LocalError: the
//     caller runs the compiler locally, unchanged.
//   - (*Compile).Spec finds the inputs with the include Scanner (gcc's
//     search rules in Go, every #if branch followed: a superset of the
//     listing) when no -MD/-MMD file is asked for, or else, and for what
//     the scanner cannot follow (a computed include), with the compiler's
//     own dependency listing (-M), run locally, or from the direct-mode
//     DepsCache without running anything. A scanned Spec (Scanned) whose
//     remote compile failed is rebuilt from the listing by Relist, which
//     says whether the scan missed a file (then a retry can help). It
//     lays out the input root (the deepest common directory of the
//     working directory and the project's files);
//     rewrites absolute paths under it to relative ones with
//     -ffile-prefix-map flags that make the object byte-identical to a
//     local compile; and mirrors the system headers under SysrootDir with
//     --sysroot (or leaves them to the workers, Settings.Headers). The
//     compiler's own directory is never sent: its identity (Identities) is
//     the Spec's Salt.
//   - After the remote compile, (*Compile).WriteDepFile writes the -MD/-MMD
//     file (produced locally by the listing, byte for byte the compiler's)
//     and (*Compile).MapDiagnostics maps the remote messages' paths back to
//     what the local compiler would print.
package cc
