package lambdatest

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/convergeplane/converge/internal/testkit/testnet"
	"github.com/convergeplane/converge/webhooksdk"
)

// EmulatorEnv names the AWS Lambda Runtime Interface Emulator binary;
// `make test` sets it after installing the pinned emulator into bin/tools.
const EmulatorEnv = "AWS_LAMBDA_RIE"

// Emulator returns the emulator's path, or skips t saying how to get it.
func Emulator(t testing.TB) string {
	t.Helper()
	rie := os.Getenv(EmulatorEnv)
	if rie == "" {
		t.Skipf("%s is not set: run `make test`, which installs the Lambda emulator into bin/tools", EmulatorEnv)
	}
	if _, err := os.Stat(rie); err != nil {
		t.Skipf("the Lambda emulator is missing (%v): run `make test` to install it", err)
	}
	return rie
}

// BuildBootstrap builds the function main in pkg (a package path or a
// directory) for this host, the way `make functions` builds it for Lambda
// (-tags lambda.norpc, no cgo), and returns the binary's path.
func BuildBootstrap(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bootstrap")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-tags", "lambda.norpc", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build bootstrap: %v\n%s", err, out)
	}
	return bin
}

// StartEmulator runs bootstrap under the emulator rie, with env added to
// the function's environment, until the test ends, and returns the address
// of its Invoke API. Its one function is named "function"; it serves one
// invocation at a time and has no Event mode.
func StartEmulator(t testing.TB, rie, bootstrap string, env ...string) string {
	t.Helper()
	// Both of the emulator's listeners on free ports: its Runtime API
	// defaults to a fixed one, which a concurrent run would collide on.
	addr, runtimeAddr := testnet.FreeAddr(t), testnet.FreeAddr(t)
	cmd := exec.Command(rie, "--runtime-interface-emulator-address", addr, "--runtime-api-address", runtimeAddr, bootstrap)
	cmd.Env = append(append(os.Environ(), "AWS_LAMBDA_FUNCTION_TIMEOUT=30", "LOG_LEVEL=warn"), env...)
	cmd.Stdout, cmd.Stderr = t.Output(), t.Output()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start emulator: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // the emulator has no graceful stop; its exit status is moot
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("emulator not listening on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// InvokeEmulator invokes the function of the emulator at addr (StartEmulator's) with
// event, RequestResponse, and returns its answer: the HTTP response object
// webhooksdk/lambda returns. It fails t unless the invoke itself succeeded.
func InvokeEmulator(t testing.TB, addr string, event []byte) events.LambdaFunctionURLResponse {
	t.Helper()
	// The emulator's one function is always named "function".
	url := "http://" + addr + "/2015-03-31/functions/function/invocations"
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(event))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	defer resp.Body.Close()
	payload, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read invoke response: %v", err)
	}
	t.Logf("invoke: %s %s", resp.Status, payload)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Amz-Function-Error") != "" {
		t.Fatalf("invoke answered %s (function error %q)", resp.Status, resp.Header.Get("X-Amz-Function-Error"))
	}
	var r events.LambdaFunctionURLResponse
	if err := json.Unmarshal(payload, &r); err != nil {
		t.Fatalf("payload is not an HTTP response object: %v", err)
	}
	return r
}

// ResultOf returns the task result a function answered with, failing t unless resp is
// a 200 carrying one.
func ResultOf(t testing.TB, resp events.LambdaFunctionURLResponse) webhooksdk.Result {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("statusCode %d, want 200: %s", resp.StatusCode, resp.Body)
	}
	var res webhooksdk.Result
	if err := json.Unmarshal([]byte(resp.Body), &res); err != nil {
		t.Fatalf("body is not a Result: %v", err)
	}
	return res
}
