package stdterraform

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// fetchGit fetches a git source with the git binary: a shallow fetch of ref (default the
// remote's HEAD) into a bare repository beside run, then git archive of the module's
// tree, unpacked into run as any archive is (same caps and checks; git archive leaves out
// submodules). The git binary rather than a Go implementation: it speaks every transport
// and server quirk, adds nothing to the provider's binary, and runs like terraform does,
// in its own process group under the task's deadline with an explicit environment: no
// system or global git config, no prompt, only the source's protocol allowed, HOME a
// scratch directory (so no credential helper: the repository must be readable without
// credentials). A failed fetch (an unreachable host, a missing repository or ref) is
// transient; a missing //subdir or an archive the checks refuse is terminal.
func (p *provider) fetchGit(ctx context.Context, src moduleSource, run string, lim sourceLimits) error {
	tmp, err := os.MkdirTemp(filepath.Dir(run), "git-")
	if err != nil {
		return fmt.Errorf("git: %w", err)
	}
	defer os.RemoveAll(tmp)
	env := []string{"PATH=" + p.path, "HOME=" + tmp, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull,
		"GIT_TERMINAL_PROMPT=0", "GIT_ALLOW_PROTOCOL=" + src.url.Scheme, "LC_ALL=C"}
	if p.caFile != "" {
		env = append(env, "GIT_SSL_CAINFO="+p.caFile)
	}
	repo := filepath.Join(tmp, "repo")
	ref := src.ref
	if ref == "" {
		ref = "HEAD"
	}
	if out, err := p.git(ctx, tmp, env, "init", "-q", "--bare", repo); err != nil {
		return fmt.Errorf("git init: %w\n%s", err, out)
	}
	if out, err := p.git(ctx, repo, env, "fetch", "-q", "--depth=1", "--no-tags", "--", src.url.String(), ref); err != nil {
		return fmt.Errorf("git fetch %s %s: %w\n%s", src.url.Redacted(), ref, err, out)
	}
	tree := "FETCH_HEAD"
	if src.subdir != "" {
		tree += ":" + src.subdir
	}
	archive := filepath.Join(tmp, "module.tar.gz")
	if out, err := p.git(ctx, repo, env, "archive", "--format=tar.gz", "-o", archive, tree); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("git archive: %w\n%s", err, out)
		}
		return fmt.Errorf("%w: git archive %s of %s at %s: %w\n%s", errContent, tree, src.url.Redacted(), ref, err, out)
	}
	f, err := os.Open(archive)
	if err != nil {
		return fmt.Errorf("git archive: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return fmt.Errorf("git archive: %w", err)
	} else if fi.Size() > lim.ArchiveBytes {
		return fmt.Errorf("%w: the module's archive is over %d bytes (config.source_limits.archive_bytes)", errContent, lim.ArchiveBytes)
	}
	return unpack(f, run, "", lim)
}

// git runs git in dir with env, in its own process group killed at ctx's end, and
// returns the tail of its output.
func (p *provider) git(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	out := &tail{max: tailBytes}
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = p.grace
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // a transport helper left behind
	}
	return out.String(), err
}
