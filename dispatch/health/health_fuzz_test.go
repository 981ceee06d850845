package health

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/convergeplane/converge/webhooksdk"
)

// FuzzReadiness: a provider's answer to a health probe is outside input.
// readiness refuses what is not a HealthResponse with an error; what it
// accepts maps each pair it names, and only those, to the readiness of the
// pair's last entry; writing that map back as an answer reads the same.
func FuzzReadiness(f *testing.F) {
	for _, s := range []string{
		`{"kinds":[{"kind":"leaf","kind_version":1,"ready":true}]}`,
		`{"kinds":[{"kind":"leaf","kind_version":1,"ready":true},{"kind":"leaf","kind_version":1,"ready":false}]}`,
		`{"kinds":[{"kind":"a/1","kind_version":2,"ready":true},{"kind":"a","kind_version":-1}]}`,
		`{"kinds":null}`, `{"kinds":[null]}`, `{"kinds":[{"kind_version":1e3}]}`, `{"kinds":[{"kind_version":"1"}]}`,
		`{"kinds":[{"ready":"yes"}]}`, `{}`, `[]`, `null`, `<html>`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ready, err := readiness(body)
		var hr webhooksdk.HealthResponse
		if (err != nil) != (json.Unmarshal(body, &hr) != nil) {
			t.Fatalf("readiness and the HealthResponse decoder disagree on %q: %v", body, err)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "unreadable answer: ") {
				t.Fatalf("error %q", err)
			}
			return
		}
		want := map[string]bool{}
		for _, k := range hr.Kinds {
			want[k.Kind+"/"+strconv.Itoa(k.KindVersion)] = k.Ready
		}
		if !maps.Equal(ready, want) {
			t.Fatalf("%q read as %v, want %v", body, ready, want)
		}
		var back webhooksdk.HealthResponse
		for _, pair := range slices.Sorted(maps.Keys(ready)) {
			i := strings.LastIndexByte(pair, '/')
			v, err := strconv.Atoi(pair[i+1:])
			if err != nil {
				t.Fatalf("key %q has no version", pair)
			}
			back.Kinds = append(back.Kinds, webhooksdk.KindReadiness{Kind: pair[:i], KindVersion: v, Ready: ready[pair]})
		}
		raw, err := json.Marshal(back)
		if err != nil {
			t.Fatal(err)
		}
		again, err := readiness(raw)
		if err != nil || !maps.Equal(again, ready) {
			t.Fatalf("%s read back as %v (%v), want %v", raw, again, err, ready)
		}
	})
}
