package sdktest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
)

// InvokeEvent returns the dispatcher's converge.v1 Lambda Invoke event
// carrying body, signed now with secret (a whsec_ secret), with extra
// headers added (e.g. x-converge-invocation: event). docs/protocol.md §15
// describes it.
func InvokeEvent(t testing.TB, secret string, body []byte, extra map[string]string) []byte {
	t.Helper()
	s, err := webhooksdk.NewSigner(secret)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	s.SetHeaders(h, NewMessageID(), time.Now(), body)
	headers := map[string]string{"content-type": "application/json"}
	for k := range h {
		headers[strings.ToLower(k)] = h.Get(k)
	}
	for k, v := range extra {
		headers[k] = v
	}
	payload, err := json.Marshal(map[string]any{
		"version": "converge.v1", "rawPath": "/", "headers": headers,
		"body": string(body), "isBase64Encoded": false,
	})
	if err != nil {
		t.Fatal(err)
	}
	return payload
}
