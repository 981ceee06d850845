package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/convergeplane/converge/internal/testkit/logbuf"
	"github.com/convergeplane/converge/internal/testkit/testnet"
)

// TestImage checks the image `make image` wrote (make test-image sets
// IMAGE_LAYOUT to it): an index of linux/arm64 and linux/amd64, each image
// passing inspect, and the binary of the platform this test runs on,
// extracted from its image, running: `converge version` prints the version
// label (run as the image's user, 65532, when the test is root), and
// `converge dev` as an unprivileged user serves /readyz and the embedded
// console.
func TestImage(t *testing.T) {
	dir := os.Getenv("IMAGE_LAYOUT")
	if dir == "" {
		t.Skip("IMAGE_LAYOUT is unset: make test-image builds the image and runs this test on it")
	}
	idx, err := layoutIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	var host v1.Image
	for _, desc := range m.Manifests {
		platforms = append(platforms, desc.Platform.String())
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range inspect(img, *desc.Platform) {
			t.Errorf("%s: %s", desc.Platform, p)
		}
		if desc.Platform.OS == runtime.GOOS && desc.Platform.Architecture == runtime.GOARCH {
			host = img
		}
	}
	if slices.Sort(platforms); !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("the index holds %v, want linux/amd64 and linux/arm64", platforms)
	}
	if host == nil {
		t.Fatalf("no image for %s/%s to run the binary of", runtime.GOOS, runtime.GOARCH)
	}
	cf, err := host.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	files, err := unpack(host)
	if err != nil {
		t.Fatal(err)
	}
	// A directory every user can walk down to: as root the binary runs as
	// the image's user, 65532, as it would in the image.
	top, err := os.MkdirTemp("", "converge-image-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(top) })
	bin := filepath.Join(top, "converge")
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, files["converge"].data, 0o755); err != nil {
		t.Fatal(err)
	}

	t.Run("Version", func(t *testing.T) {
		out, err := asUser(exec.CommandContext(t.Context(), bin, "version"), nonrootID, nonrootID).CombinedOutput()
		if err != nil {
			t.Fatalf("converge version: %v\n%s", err, out)
		}
		if got, want := strings.TrimSpace(string(out)), cf.Config.Labels[labelVersion]; got != want {
			t.Errorf("converge version printed %q, the image's %s label is %q", got, labelVersion, want)
		}
	})

	t.Run("DevReady", func(t *testing.T) {
		data := filepath.Join(top, "data")
		if err := os.Mkdir(data, 0o755); err != nil {
			t.Fatal(err)
		}
		// initdb looks its user up in this machine's /etc/passwd, which has
		// no 65532: as root, dev runs as nobody, unprivileged all the same.
		uid, gid := -1, -1
		if os.Geteuid() == 0 {
			u, err := user.Lookup("nobody")
			if err != nil {
				t.Skipf("running as root and no user nobody to run converge dev as: %v", err)
			}
			uid, _ = strconv.Atoi(u.Uid)
			gid, _ = strconv.Atoi(u.Gid)
			if err := os.Chown(data, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
		api, health := testnet.FreeAddr(t), testnet.FreeAddr(t)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		cmd := asUser(exec.CommandContext(ctx, bin, "dev"), uid, gid)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + data, "CONVERGE_DATA_DIR=" + data,
			"LISTEN_ADDR=" + api, "HEALTH_ADDR=" + health, "LOG_LEVEL=warn"}
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = time.Minute
		var out logbuf.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		defer func() {
			cancel()
			if err := <-exited; err != nil && !errors.Is(err, context.Canceled) {
				t.Logf("converge dev stopped: %v", err)
			}
			t.Logf("converge dev's output:\n%s", out.String())
		}()

		deadline := time.Now().Add(4 * time.Minute)
		for code := 0; code != http.StatusOK; code = status(ctx, "http://"+health+"/readyz") {
			select {
			case err := <-exited:
				exited <- err
				if strings.Contains(out.String(), "PostgreSQL server binaries") {
					t.Skipf("converge dev needs PostgreSQL server binaries (make postgres installs them): %s", out.String())
				}
				t.Fatalf("converge dev exited before /readyz answered 200: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz did not answer 200 within four minutes (last %d)", code)
			}
			time.Sleep(100 * time.Millisecond) // polling toward the deadline
		}
		page := get(ctx, t, "http://"+api+"/")
		if !strings.Contains(page, `<div id="root">`) || strings.Contains(page, "not built") {
			t.Errorf("GET / is not the built console:\n%s", page)
		}
	})
}

// asUser makes cmd run as uid:gid when this test is root (and neither is
// negative), so the binary meets an unprivileged user's permissions, as in
// the image.
func asUser(cmd *exec.Cmd, uid, gid int) *exec.Cmd {
	if os.Geteuid() == 0 && uid >= 0 && gid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	return cmd
}

// status returns url's status code, 0 when there is no answer.
func status(ctx context.Context, url string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// get returns url's body, failing the test unless it answers 200.
func get(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return string(b)
}
