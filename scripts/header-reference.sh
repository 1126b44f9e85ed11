#!/bin/sh
# Renders include/fabriclib.h as a Markdown reference: the header's
# preamble, then every macro, type and function in header order, each with
# its declaration and its comment ("Returns:" and "Blocks:" set off). The
# build runs it (CMake: fabriclib_reference, installed as
# share/doc/fabriclib/reference.md); nothing in it is written by hand.
#   usage: scripts/header-reference.sh include/fabriclib.h > reference.md
set -eu
awk '
function flush_comment() { comment = ""; }
function emit(kind, name, decl,    i, n, lines, l, text) {
    sub(/^\*+/, "", name)
    # A name declared again without a comment (the C and C++ branches of one
    # typedef, a forward declaration) is shown once.
    if ((name in seen) && comment == "") { return }
    seen[name] = 1
    items[++count] = name; kinds[count] = kind
    out = out "\n### `" name "`\n\n```c\n" decl "```\n"
    if (comment != "") {
        n = split(comment, lines, "\n")
        text = ""
        for (i = 1; i < n; i++) {
            l = lines[i]
            if (l ~ /^(Returns|Blocks):/) { sub(/^Returns:/, "**Returns:**", l); sub(/^Blocks:/, "**Blocks:**", l); text = text "\n" }
            text = text l "\n"
        }
        out = out "\n" text
    }
    flush_comment()
}
BEGIN { in_pre = 0; pre = ""; out = ""; comment = ""; decl = ""; depth = 0; count = 0 }
NR == 1 && /^\/\*/ { in_pre = 1; next }
in_pre {
    if ($0 ~ /^ \*\//) { in_pre = 0; next }
    l = $0; sub(/^ \* ?/, "", l); pre = pre l "\n"; next
}
decl != "" {
    decl = decl $0 "\n"
    if ((struct_decl && $0 ~ /^}.*;[ \t]*$/) || (!struct_decl && $0 ~ /;[ \t]*$/)) { emit(kind, name, decl); decl = "" }
    next
}
/^\/\// { l = $0; sub(/^\/\/ ?/, "", l); comment = comment l "\n"; next }
/^#define FABRICLIB_/ { name = $2; sub(/\(.*/, "", name); emit("macro", name, $0 "\n"); next }
/^(typedef|struct|enum)[ \t]/ {
    # A body follows: `{` on this line, or (an enum with a C23 base type) later.
    struct_decl = ($0 ~ /\{[ \t]*$/) || ($0 !~ /;/ && $0 !~ /\(/)
    if ($0 ~ /\(\*/) { name = $0; sub(/^[^(]*\(\*/, "", name); sub(/\).*/, "", name); kind = "callback" }
    else if (struct_decl) { name = $1 " " $2; kind = "type" }
    else { name = $NF; sub(/;.*/, "", name); kind = "type" }
    decl = $0 "\n"
    if (!struct_decl && $0 ~ /;[ \t]*$/) { emit(kind, name, decl); decl = "" }
    next
}
/^[a-z].*fabriclib_[a-z_0-9]*\(/ {
    name = $0; sub(/\(.*/, "", name); sub(/.*[ *]/, "", name); kind = "function"; struct_decl = 0
    decl = $0 "\n"
    if ($0 ~ /;[ \t]*$/) { emit(kind, name, decl); decl = "" }
    next
}
/^[ \t]*$/ { flush_comment(); next }
{ flush_comment() }
END {
    print "# fabriclib C API reference\n"
    print "Generated from `include/fabriclib.h` by `scripts/header-reference.sh` at build time; the header is the source.\n"
    print "## Conventions\n\n```text\n" pre "```\n"
    printf "## Functions\n\n"
    for (i = 1; i <= count; i++) if (kinds[i] == "function") printf "[`%s`](#%s) ", items[i], items[i]
    print "\n\n## Declarations, in header order"
    printf "%s", out
}
' "$1"
