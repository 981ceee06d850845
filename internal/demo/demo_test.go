package demo

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

func TestDemoFor(t *testing.T) {
	t.Parallel()
	d, err := For("classic", "large", 0.25)
	if err != nil {
		t.Fatal(err)
	}
	if d.binary != "classic-provider" || !slices.Equal(d.objects, []string{"objects", "--bom", "large"}) ||
		!slices.Contains(d.env, "FAKE_FAULT_RATE=0.25") || !d.s3 {
		t.Errorf("classic large 0.25 = %+v", d)
	}
	if d, err := For("quickstart", "small", 0); err != nil || d.binary != "quickstart-provider" || d.s3 {
		t.Errorf("quickstart = %+v, %v", d, err)
	}
	for _, c := range []struct {
		name, bom string
		rate      float64
	}{{"classic", "huge", 0}, {"classic", "small", 1}, {"classic", "small", -0.1}, {"other", "small", 0}} {
		if _, err := For(c.name, c.bom, c.rate); err == nil {
			t.Errorf("For(%q, %q, %g) accepted", c.name, c.bom, c.rate)
		}
	}
}

func TestWithS3(t *testing.T) {
	t.Parallel()
	sink := json.RawMessage(`{"name":"sink","kind":"statussink","kind_version":1,"spec":{"endpoint":"x"}}`)
	got, err := withS3(sink, "http://127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	var pc struct {
		Name string         `json:"name"`
		Spec map[string]any `json:"spec"`
	}
	if err := json.Unmarshal(got, &pc); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"endpoint": "http://127.0.0.1:9", "bucket": "converge-demo", "prefix": "status", "region": "us-east-1"}
	if pc.Name != "sink" || len(pc.Spec) != len(want) || pc.Spec["endpoint"] != want["endpoint"] || pc.Spec["bucket"] != want["bucket"] ||
		pc.Spec["prefix"] != want["prefix"] || pc.Spec["region"] != want["region"] {
		t.Errorf("statussink config = %s", got)
	}
	other := json.RawMessage(`{"name":"v","kind":"vpc","kind_version":1,"spec":{"a":1}}`)
	if got, err := withS3(other, "http://127.0.0.1:9"); err != nil || !bytes.Equal(got, other) {
		t.Errorf("a vpc config became %s, %v", got, err)
	}
	if _, err := withS3(sink, ""); err == nil {
		t.Error("a statussink config without an S3 store passed")
	}
}
