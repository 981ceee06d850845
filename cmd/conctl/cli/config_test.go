package cli

import (
	"encoding/pem"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bearer is the token the last recorded request carried.
func bearer(t *testing.T, b *testBundle) string {
	t.Helper()
	reqs := b.api.recorded()
	if len(reqs) == 0 {
		t.Fatal("no request recorded")
	}
	return strings.TrimPrefix(reqs[len(reqs)-1].Header.Get("Authorization"), "Bearer ")
}

// tableFields is a table's cells, one space apart, so that a test does not
// depend on the widths of columns holding ports.
func tableFields(s string) string {
	var out strings.Builder
	for line := range strings.Lines(s) {
		out.WriteString(strings.Join(strings.Fields(line), " ") + "\n")
	}
	return out.String()
}

// TestContexts: a config file's contexts supply the server, the token (or
// a token command) and the CA, beneath the environment and the flags.
func TestContexts(t *testing.T) {
	t.Parallel()
	b := setupWith(t, apiOptions{auth: true})
	cfg := filepath.Join(b.dir, "conf", "config.yaml")
	b.env = map[string]string{EnvConfig: cfg}
	unreachable := deadServer(t)

	t.Run("SetUseGetCurrentDelete", func(t *testing.T) {
		r := b.run(t, "", "config", "set-context", "prod", "--server", b.api.url, "--token", testReadToken)
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, `context "prod" created in `+cfg+"\n")
		st, err := os.Stat(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("config file mode = %v, want 0600", st.Mode().Perm())
		}
		r = b.run(t, "", "config", "current-context")
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stderr, "Error: no current context in "+cfg+" (conctl config use-context NAME sets one)\n")

		wantCode(t, b.run(t, "", "config", "set-context", "dead", "--server", unreachable, "--token-command", "echo nope"), ExitOK)
		wantCode(t, b.run(t, "", "config", "use-context", "prod"), ExitOK)
		r = b.run(t, "", "config", "current-context")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "prod\n")

		r = b.run(t, "", "config", "get-contexts")
		wantCode(t, r, ExitOK)
		wantOutput(t, tableFields(r.stdout), "CURRENT NAME SERVER AUTH CA NAMESPACE\n"+
			"* prod "+b.api.url+" token <none> default\n"+
			"dead "+unreachable+" token-command <none> default\n")
		if strings.Contains(r.stdout, testReadToken) {
			t.Error("get-contexts printed a token")
		}
		r = b.run(t, "", "config", "use-context", "nope")
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stderr, `Error: no context "nope" in `+cfg+" (conctl config get-contexts lists them)\n")
	})

	t.Run("ContextSuppliesServerAndToken", func(t *testing.T) {
		r := b.run(t, "", "list", "kinds")
		wantCode(t, r, ExitOK)
		if got := bearer(t, b); got != testReadToken {
			t.Errorf("token = %q, want the context's", got)
		}
	})

	t.Run("EnvBeatsContext", func(t *testing.T) {
		b.env[EnvToken] = testAdminToken
		defer delete(b.env, EnvToken)
		wantCode(t, b.run(t, "", "list", "kinds"), ExitOK)
		if got := bearer(t, b); got != testAdminToken {
			t.Errorf("token = %q, want $%s's", got, EnvToken)
		}
		// The dead context's server, overridden by the environment's.
		b.env[EnvServer] = b.api.url
		defer delete(b.env, EnvServer)
		wantCode(t, b.run(t, "", "--context", "dead", "--token", testReadToken, "list", "kinds"), ExitOK)
	})

	t.Run("FlagBeatsEnv", func(t *testing.T) {
		b.env[EnvToken] = "wrong"
		defer delete(b.env, EnvToken)
		wantCode(t, b.run(t, "", "--token", testAdminToken, "list", "kinds"), ExitOK)
		if got := bearer(t, b); got != testAdminToken {
			t.Errorf("token = %q, want --token's", got)
		}
		r := b.run(t, "", "--server", unreachable, "list", "kinds", "--retries", "0")
		wantCode(t, r, ExitFailure)
		if !strings.Contains(r.stderr, "cannot reach the converge server at "+unreachable) {
			t.Errorf("stderr = %q, want --server's unreachable server", r.stderr)
		}
	})

	t.Run("TokenCommandRunsOncePerInvocation", func(t *testing.T) {
		runs := filepath.Join(b.dir, "runs")
		wantCode(t, b.run(t, "", "config", "set-context", "cmd", "--server", b.api.url,
			"--token-command", "echo run >> "+runs+"; printf '  %s\\n' "+testAdminToken), ExitOK)
		wantCode(t, b.run(t, "", "apply", "--type", "manifest", "-f", b.file(t, "kinds.json", "["+manifestVPC1+","+manifestStatusSink+"]")), ExitFailure)
		r := b.run(t, "", "--context", "cmd", "apply", "--type", "manifest", "-f", b.file(t, "kinds.json", "["+manifestVPC1+","+manifestStatusSink+"]"))
		wantCode(t, r, ExitOK)
		if got := bearer(t, b); got != testAdminToken {
			t.Errorf("token = %q, want the command's output trimmed", got)
		}
		data, err := os.ReadFile(runs)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(data), "run"); n != 1 {
			t.Errorf("the token command ran %d times for two requests, want once", n)
		}

		wantCode(t, b.run(t, "", "config", "set-context", "cmd", "--token-command", "echo oops >&2; exit 3"), ExitOK)
		r = b.run(t, "", "--context", "cmd", "list", "kinds")
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stderr, "Error: config file "+cfg+`: context "cmd": token-command failed: exit status 3: oops`+"\n")
	})

	t.Run("DeleteContext", func(t *testing.T) {
		wantCode(t, b.run(t, "", "config", "delete-context", "prod"), ExitOK)
		r := b.run(t, "", "config", "current-context")
		wantCode(t, r, ExitFailure)
		r = b.run(t, "", "config", "get-contexts", "-o", "json")
		wantCode(t, r, ExitOK)
		jsonEqual(t, []byte(r.stdout), `{"items": [
			{"name": "dead", "current": false, "server": "`+unreachable+`", "auth": "token-command"},
			{"name": "cmd", "current": false, "server": "`+b.api.url+`", "auth": "token-command"}]}`)
	})
}

// TestContextFileErrors: a broken config file is reported by its path and
// the key at fault, and no request is sent.
func TestContextFileErrors(t *testing.T) {
	t.Parallel()
	b := setupNoAPI(t)
	cfg := b.file(t, "config.yaml", "")
	b.env = map[string]string{EnvConfig: cfg}
	for _, tt := range []struct{ name, file, want string }{
		{"UnknownKey", "contexts:\n- name: a\n  tokn: x\n", "Error: config file " + cfg + ": yaml: unmarshal errors:\n  line 3: field tokn not found in type cli.Context\n"},
		{"MissingCurrent", "current-context: b\ncontexts:\n- name: a\n", "Error: config file " + cfg + `: current-context "b" names no context` + "\n"},
		{"BothTokens", "current-context: a\ncontexts:\n- name: a\n  token: x\n  token-command: echo y\n", "Error: config file " + cfg + ": contexts[0] (a): token and token-command are both set; keep one\n"},
		{"BadServer", "current-context: a\ncontexts:\n- name: a\n  server: ftp://x\n", "Error: config file " + cfg + `: context "a": server: invalid server URL "ftp://x": want http:// or https://` + "\n"},
		{"BadCA", "current-context: a\ncontexts:\n- name: a\n  certificate-authority: " + cfg + "\n", "Error: config file " + cfg + `: context "a": certificate-authority: ` + cfg + " holds no PEM certificate\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(cfg, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			r := b.run(t, "", "list", "kinds")
			if r.code == ExitOK {
				t.Error("exit status 0")
			}
			if !strings.HasPrefix(r.stderr, tt.want) {
				t.Errorf("stderr = %q, want it to start %q", r.stderr, tt.want)
			}
		})
	}
	r := b.run(t, "", "--context", "zzz", "list", "kinds")
	if !strings.Contains(r.stderr, `--context "zzz": no such context in `+cfg) {
		t.Errorf("stderr = %q", r.stderr)
	}
}

// TestContextFileXDGPath: without $CONVERGE_CONFIG the file is under
// $XDG_CONFIG_HOME, else under ~/.config.
func TestContextFileXDGPath(t *testing.T) {
	t.Parallel()
	b := setupNoAPI(t)
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"XDG_CONFIG_HOME": filepath.Join(b.dir, "xdg"), "HOME": filepath.Join(b.dir, "home")}, filepath.Join(b.dir, "xdg", "converge", "config.yaml")},
		{map[string]string{"HOME": filepath.Join(b.dir, "home")}, filepath.Join(b.dir, "home", ".config", "converge", "config.yaml")},
	} {
		b.env = tt.env
		wantCode(t, b.run(t, "", "config", "set-context", "x", "--server", "http://example.test"), ExitOK)
		data, err := os.ReadFile(tt.want)
		if err != nil {
			t.Fatal(err)
		}
		wantOutput(t, string(data), "contexts:\n    - name: x\n      server: http://example.test\n")
	}
}

// TestContextCertificateAuthority: a context's certificate-authority is
// the CA an https server is checked against (here a TLS front of the API
// with its own self-signed certificate, which the system does not trust).
func TestContextCertificateAuthority(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target, err := url.Parse(b.api.url)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewTLSServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }})
	t.Cleanup(front.Close)
	ca := b.file(t, "ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: front.Certificate().Raw})))
	b.env = map[string]string{EnvConfig: filepath.Join(b.dir, "config.yaml")}

	wantCode(t, b.run(t, "", "config", "set-context", "tls", "--server", front.URL, "--current"), ExitOK)
	r := b.run(t, "", "list", "kinds", "--retries", "0")
	wantCode(t, r, ExitFailure)
	if !strings.Contains(r.stderr, "certificate") {
		t.Errorf("stderr = %q, want the unknown certificate refused", r.stderr)
	}
	wantCode(t, b.run(t, "", "config", "set-context", "tls", "--certificate-authority", ca), ExitOK)
	wantCode(t, b.run(t, "", "list", "kinds"), ExitOK)
	// The flag wins over the context.
	r = b.run(t, "", "list", "kinds", "--certificate-authority", filepath.Join(b.dir, "none.pem"))
	wantCode(t, r, ExitFailure)
	wantOutput(t, r.stderr, "Error: --certificate-authority: open "+filepath.Join(b.dir, "none.pem")+": no such file or directory\n")
}
