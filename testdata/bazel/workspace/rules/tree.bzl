"""A tiny rule whose single output is a directory (a tree artifact)."""

def _tree_artifact_impl(ctx):
    out = ctx.actions.declare_directory(ctx.label.name)
    commands = ["set -e"]
    for path, content in sorted(ctx.attr.files.items()):
        commands.append('mkdir -p "$(dirname "$1/%s")"' % path)
        commands.append('echo "%s" > "$1/%s"' % (content, path))
    ctx.actions.run_shell(
        outputs = [out],
        arguments = [out.path],
        command = "\n".join(commands),
        mnemonic = "TreeArtifact",
        progress_message = "Writing directory %s" % out.short_path,
    )
    return [DefaultInfo(
        files = depset([out]),
        runfiles = ctx.runfiles(files = [out]),
    )]

tree_artifact = rule(
    implementation = _tree_artifact_impl,
    attrs = {
        "files": attr.string_dict(doc = "relative path -> one line of content"),
    },
)
