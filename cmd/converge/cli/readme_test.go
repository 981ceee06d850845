package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// readme is the README at the repository's root.
func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// layoutPaths are the paths the README's layout table lists, each row's
// first cell (`a`, `b/`), with the rest of its row.
func layoutPaths(t *testing.T) map[string]string {
	t.Helper()
	_, table, ok := strings.Cut(readme(t), "\n## Layout\n")
	if !ok {
		t.Fatal("README has no Layout section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	rows := map[string]string{}
	for _, l := range strings.Split(table, "\n") {
		cells := strings.SplitN(l, " | ", 2)
		if len(cells) != 2 || !strings.HasPrefix(cells[0], "| `") {
			continue
		}
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cells[0], -1) {
			rows[strings.TrimSuffix(m[1], "/")] = cells[1]
		}
	}
	if len(rows) < 10 {
		t.Fatalf("README's layout table lists %d paths: %v", len(rows), rows)
	}
	return rows
}

// TestReadmeNamesOnlyRealSubcommands keeps the README's layout table honest:
// every `word` it lists for cmd/converge is a subcommand the binary has.
func TestReadmeNamesOnlyRealSubcommands(t *testing.T) {
	t.Parallel()
	row, ok := layoutPaths(t)["cmd/converge"]
	if !ok {
		t.Fatal("README has no cmd/converge row in its layout table")
	}
	root := newRoot(io.Discard, io.Discard, func(string) string { return "" })
	for _, m := range regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(row, -1) {
		if m[1] == "converge" {
			continue
		}
		if c, _, err := root.Find([]string{m[1]}); err != nil || c == root {
			t.Errorf("README lists `%s` for cmd/converge, but converge has no such subcommand", m[1])
		}
	}
}

// TestReadmeLayoutListsTheTree: every path the README's layout table
// lists exists, and every top-level directory of the repository (but
// hidden and ignored ones) is in it, itself or by a path beneath it.
func TestReadmeLayoutListsTheTree(t *testing.T) {
	t.Parallel()
	const top = "../../.."
	rows := layoutPaths(t)
	for p := range rows {
		if _, err := os.Stat(filepath.Join(top, p)); err != nil {
			t.Errorf("README's layout table lists %s: %v", p, err)
		}
	}
	ignore, err := os.ReadFile(filepath.Join(top, ".gitignore"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(top)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || strings.HasPrefix(name, ".") || slices.Contains(strings.Split(string(ignore), "\n"), "/"+name+"/") {
			continue
		}
		listed := false
		for p := range rows {
			listed = listed || p == name || strings.HasPrefix(p, name+"/")
		}
		if !listed {
			t.Errorf("README's layout table does not list %s/", name)
		}
	}
}

// A tourCommand is a command of the README's tour as a person types it,
// with its standard input (a heredoc or an echo piped in) and the output
// the README shows (none in an sh block).
type tourCommand struct {
	line, stdin string
	want        []string
	shown       bool
}

// tour parses the fenced blocks of the README's "A 5-minute tour": in a
// console block "$ " starts a command (a trailing \ continues it, a heredoc
// follows it) and the lines up to the next one are its output; in an sh
// block each line is a command.
func tour(t *testing.T) []tourCommand {
	t.Helper()
	_, section, ok := strings.Cut(readme(t), "\n## A 5-minute tour\n")
	if !ok {
		t.Fatal("README has no \"A 5-minute tour\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var (
		cmds  []tourCommand
		fence string
	)
	lines := strings.Split(section, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case fence == "" && strings.HasPrefix(l, "```"):
			fence = strings.TrimPrefix(l, "```")
			if fence != "console" && fence != "sh" {
				t.Fatalf("the tour has a ```%s block: want console (commands and their output) or sh (commands)", fence)
			}
		case l == "```":
			fence = ""
		case fence == "sh" && strings.TrimSpace(l) != "":
			cmds = append(cmds, tourCommand{line: l})
		case fence == "console" && strings.HasPrefix(l, "$ "):
			c := tourCommand{line: strings.TrimPrefix(l, "$ "), shown: true}
			for strings.HasSuffix(c.line, " \\") && i+1 < len(lines) {
				i++
				c.line = strings.TrimSuffix(c.line, "\\") + strings.TrimSpace(lines[i])
			}
			if m := regexp.MustCompile(`<<'(\w+)'`).FindStringSubmatch(c.line); m != nil {
				for i++; i < len(lines) && lines[i] != m[1]; i++ {
					c.stdin += lines[i] + "\n"
				}
			}
			cmds = append(cmds, c)
		case fence == "console":
			if len(cmds) == 0 || !cmds[len(cmds)-1].shown {
				t.Fatalf("the tour shows output before any command: %q", l)
			}
			cmds[len(cmds)-1].want = append(cmds[len(cmds)-1].want, l)
		}
	}
	return cmds
}

// TestReadmeTour runs the README's tour against the quickstart demo, as
// the README says to, and compares what each command prints with what the
// README shows: times, ages and ids aside, "..." standing for lines left
// out. A command of the tour runs bin/conctl (its input from a heredoc or
// an echo) or curl; a conctl command exits 0 unless its output shown is
// an error, a curl answers 200 with JSON.
func TestReadmeTour(t *testing.T) {
	t.Parallel()
	cmds := tour(t)
	if len(cmds) < 12 {
		t.Fatalf("the tour has %d commands", len(cmds))
	}
	r := startDemo(t, "--demo=quickstart")
	for _, c := range cmds {
		line, stdin := c.line, c.stdin
		if m := regexp.MustCompile(`^echo '([^']*)' \| (.*)$`).FindStringSubmatch(line); m != nil {
			stdin, line = m[1]+"\n", m[2]
		}
		if m := regexp.MustCompile(`^cat <<'\w+' \| (.*)$`).FindStringSubmatch(line); m != nil {
			line = m[1]
		}
		args := words(t, line)
		switch {
		case args[0] == "bin/conctl":
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			stdout, stderr, code := r.conctl(ctx, stdin, args[1:]...)
			cancel()
			got := strings.Split(strings.TrimRight(stdout+stderr, "\n"), "\n")
			refused := len(c.want) > 0 && strings.HasPrefix(c.want[0], "Error:")
			if (code != 0) != refused {
				t.Errorf("%s exited %d:\n%s%s", c.line, code, stdout, stderr)
			}
			if c.shown && !sameOutput(c.want, got) {
				t.Errorf("README shows for %s:\n%s\nwhich prints:\n%s", c.line, strings.Join(c.want, "\n"), strings.Join(got, "\n"))
			}
		case args[0] == "curl" && args[1] == "-s" && !c.shown:
			u := strings.Replace(args[2], "localhost:8080", strings.TrimPrefix(r.base, "http://"), 1)
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+u, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || !json.Valid(body) {
				t.Errorf("%s: %s %v, %q", c.line, resp.Status, err, body)
			}
		default:
			t.Fatalf("the tour's command %q is neither bin/conctl nor curl -s (without output shown): teach TestReadmeTour to run it", c.line)
		}
	}
}

// sameOutput compares output lines shown with those printed, each with
// its spaces collapsed and its times, durations and ids blanked: with a
// "..." line shown, the others must be printed in that order among more;
// without, the same lines in any order (a list of the children of one
// composition has no set order).
func sameOutput(want, got []string) bool {
	volatile := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\b\d+(\.\d+)?(ms|s|m|h)\b`)
	norm := func(lines []string) []string {
		out := make([]string, 0, len(lines))
		for _, l := range lines {
			out = append(out, strings.Join(strings.Fields(volatile.ReplaceAllString(l, "_")), " "))
		}
		return out
	}
	w, g := norm(want), norm(got)
	if !slices.Contains(w, "...") {
		slices.Sort(w)
		slices.Sort(g)
		return slices.Equal(w, g)
	}
	for _, l := range w {
		if l == "..." {
			continue
		}
		i := slices.Index(g, l)
		if i < 0 {
			return false
		}
		g = g[i+1:]
	}
	return true
}

// words splits a command line as a shell would, for the quoting the tour
// uses: 'single' and "double" quotes, no escapes.
func words(t *testing.T, line string) []string {
	t.Helper()
	var (
		out   []string
		cur   strings.Builder
		quote rune
		in    bool
	)
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		t.Fatalf("unbalanced quotes in %q", line)
	}
	if in {
		out = append(out, cur.String())
	}
	if len(out) == 0 {
		t.Fatalf("an empty command in the tour")
	}
	return out
}
