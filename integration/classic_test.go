package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/convergeplane/converge/internal/testkit/logbuf"
)

// classicObjects is what `classic-provider objects` prints.
type classicObjects struct {
	Manifests       []map[string]any `json:"manifests"`
	ProviderConfigs []map[string]any `json:"providerconfigs"`
	Bindings        []map[string]any `json:"bindings"`
	Resources       []map[string]any `json:"resources"`
}

// classicProvider is a running classic-provider process.
type classicProvider struct {
	bin, addr string
}

// buildClassicProvider builds cmd/classic-provider once per test.
func buildClassicProvider(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "classic-provider")
	if out, err := exec.Command("go", "build", "-o", bin, "../examples/classic/cmd/classic-provider").CombinedOutput(); err != nil {
		t.Fatalf("build classic-provider: %v\n%s", err, out)
	}
	return bin
}

func classicObjectsOf(t testing.TB, bin, bom string) classicObjects {
	t.Helper()
	out, err := exec.Command(bin, "objects", "--bom", bom).Output()
	must(t, err)
	var o classicObjects
	if err := json.Unmarshal(out, &o); err != nil || len(o.Manifests) == 0 || len(o.Resources) != 1 {
		t.Fatalf("classic-provider objects --bom %s: %v\n%s", bom, err, out)
	}
	return o
}

// startClassicProvider runs bin with env and registers it through the API as
// the endpoint of every kind in manifests.
func (s *server) startClassicProvider(bin string, manifests []map[string]any, env ...string) classicProvider {
	t := s.t
	t.Helper()
	var kinds []map[string]any
	for _, m := range manifests {
		kinds = append(kinds, map[string]any{"kind": m["kind"], "kind_version": m["kind_version"]})
	}
	cmd := exec.Command(bin)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"),
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true"}, env...)
	addr, _ := s.startProviderProcess("classic", cmd, kinds)
	return classicProvider{bin: bin, addr: addr}
}

// teardowns reads the provider's teardown log.
func (p classicProvider) teardowns(t *testing.T) []string {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + "/debug/teardowns")
	must(t, err)
	defer resp.Body.Close()
	var log []string
	must(t, json.NewDecoder(resp.Body).Decode(&log))
	return log
}

// applyClassic applies the manifests, provider configs and bindings of o
// through the REST API; sinkEndpoint (if not empty) points statussink at it.
func (s *server) applyClassic(o classicObjects, sinkEndpoint string) {
	t := s.t
	t.Helper()
	for _, m := range o.Manifests {
		if code, body := s.call("PUT", "/kinds/"+m["kind"].(string)+"/manifest", m); code != 201 {
			t.Fatalf("manifest %s/%v = %d %s", m["kind"], m["kind_version"], code, body)
		}
	}
	for _, pc := range o.ProviderConfigs {
		if pc["kind"] == "statussink" && sinkEndpoint != "" {
			pc["spec"].(map[string]any)["endpoint"] = sinkEndpoint
		}
		s.stdPost("/providerconfigs", pc, 201)
	}
	for _, b := range o.Bindings {
		s.stdPost("/reactor-bindings", b, 201)
	}
}

// applyResource applies r and returns the response code.
func (s *server) applyResource(r map[string]any) int {
	s.t.Helper()
	code, body := s.call("POST", "/resources", r)
	if code != 201 && code != 200 {
		s.t.Fatalf("apply %s/%s = %d %s", r["kind"], r["name"], code, body)
	}
	return code
}

// bomChildren is the set "kind/name" a BOM's composer should produce, built
// independently of the provider from the BOM's spec.
func bomChildren(r map[string]any) map[string]bool {
	root := r["name"].(string)
	want := map[string]bool{}
	for _, d := range r["spec"].(map[string]any)["domains"].([]any) {
		dom := d.(map[string]any)
		base := root + "-" + dom["name"].(string)
		net, ok := dom["networking"].(bool)
		net = net || !ok
		if net {
			want["account/"+base+"-tgw-host"], want["tgw/"+base] = true, true
		}
		for _, team := range dom["teams"].([]any) {
			n := base + "-" + team.(string)
			want["account/"+n], want["vpc/"+n] = true, true
			if net {
				want["route/"+n] = true
			}
		}
	}
	return want
}

// classicTree is the BOM root's children by "kind/name" with their phases,
// read page by page without their specs and statuses.
func (s *server) classicTree(root string) map[string]string {
	s.t.Helper()
	got := map[string]string{}
	for cursor := ""; ; {
		path := "/resources/classicbom/" + root + "/children?fields=-spec,-status"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		code, body := s.call("GET", path, nil)
		if code != 200 {
			s.t.Fatalf("children of %s = %d %s", root, code, body)
		}
		var list struct {
			Items []struct {
				Kind, Name, Phase string
			} `json:"items"`
			NextCursor string `json:"next_cursor"`
		}
		must(s.t, json.Unmarshal(body, &list))
		for _, c := range list.Items {
			got[c.Kind+"/"+c.Name] = c.Phase
		}
		if cursor = list.NextCursor; cursor == "" {
			return got
		}
	}
}

// waitClassicConverged waits until the root is Ready at its latest generation
// with exactly the children want, all Ready, and its rollup counting them.
func (s *server) waitClassicConverged(root string, want map[string]bool, within time.Duration) {
	s.t.Helper()
	var last string
	deadline := time.Now().Add(within)
	for !s.classicConverged(root, want, &last) {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out after %s waiting for classicbom/%s to converge; last: %.2000s", within, root, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Logf("classicbom/%s converged (%d children)", root, len(want))
}

// classicConverged reports whether the root has converged to want, and
// otherwise sets last to why not.
func (s *server) classicConverged(root string, want map[string]bool, last *string) bool {
	r, body := s.stdResource("classicbom", root)
	*last = body
	{
		if r.Phase != "Ready" {
			return false
		}
		tree := s.classicTree(root)
		if len(tree) != len(want) {
			*last = fmt.Sprintf("%d children, want %d: %v", len(tree), len(want), tree)
			return false
		}
		for k := range want {
			if tree[k] != "Ready" {
				*last = fmt.Sprintf("%s is %q", k, tree[k])
				return false
			}
		}
		var st struct{ Ready, Total int }
		return json.Unmarshal(r.Status, &st) == nil && st.Ready == len(want) && st.Total == len(want)
	}
}

// startMoto runs moto_server on a free loopback port and creates bucket; it
// returns the endpoint, or "" (having logged why) when moto_server is absent.
func startMoto(t *testing.T, bucket string) (string, *s3.Client) {
	t.Helper()
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		t.Log("moto_server is not installed: the statussink checks are skipped")
		return "", nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	must(t, ln.Close())
	var out logbuf.Buffer
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", fmt.Sprint(port))
	cmd.Stdout, cmd.Stderr = &out, &out
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("moto_server output:\n%.4000s", out.String())
		}
	})
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
	client := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
	waitFor(t, 30*time.Second, "moto_server to create the bucket", func() bool {
		_, err := client.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(bucket)})
		return err == nil
	})
	return endpoint, client
}

// sinkKeys lists the statussink objects in bucket.
func sinkKeys(t *testing.T, c *s3.Client, bucket string) []string {
	t.Helper()
	out, err := c.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	must(t, err)
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	slices.Sort(keys)
	return keys
}

// firstIndex is where entry first appears in log, or -1.
func firstIndex(log []string, entry string) int { return slices.Index(log, entry) }

// TestClassicDemo runs the classic demo over HTTP against the real
// classic-provider process: the small BOM converges with its value flows and
// rollup; statussink writes one object per root generation to moto; the
// updated BOM prunes one team through its finalizers and adds another; and
// deleting the root tears the tree down in reverse dependency order.
func TestClassicDemo(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	bin := buildClassicProvider(t)
	small, updated := classicObjectsOf(t, bin, "small"), classicObjectsOf(t, bin, "updated")
	const bucket = "converge-status"
	for _, pc := range small.ProviderConfigs {
		if pc["kind"] == "statussink" && pc["spec"].(map[string]any)["bucket"] != bucket {
			t.Fatalf("statussink config %v does not name bucket %s", pc, bucket)
		}
	}
	endpoint, store := startMoto(t, bucket)
	p := s.startClassicProvider(bin, small.Manifests, "FAKE_DELETE_DELAY=20ms")
	if endpoint == "" {
		// Without a store the binding would only retry: leave it out.
		small.Bindings = nil
	}
	s.applyClassic(small, endpoint)

	bom := small.Resources[0]
	root := bom["name"].(string)
	if code := s.applyResource(bom); code != 201 {
		t.Fatalf("apply BOM = %d, want 201", code)
	}
	want := bomChildren(bom)
	if len(want) < 20 {
		t.Fatalf("the small BOM composes %d children, want a few dozen", len(want))
	}
	s.waitClassicConverged(root, want, 40*time.Second)

	// The value flows: a team's vpc carries its account's id, its route the
	// vpc's and the domain's tgw's ids.
	var acct, vpc, tgw, route struct {
		Status map[string]any `json:"status"`
		Spec   map[string]any `json:"spec"`
	}
	team, dom := root+"-payments-checkout", root+"-payments"
	for _, x := range []struct {
		kind, name string
		into       any
	}{{"account", team, &acct}, {"vpc", team, &vpc}, {"tgw", dom, &tgw}, {"route", team, &route}} {
		_, body := s.call("GET", "/resources/"+x.kind+"/"+x.name, nil)
		must(t, json.Unmarshal(body, x.into))
	}
	if id := acct.Status["account_id"]; id == nil || vpc.Spec["account_id"] != id || vpc.Status["account_id"] != id {
		t.Errorf("account_id did not flow: account %v, vpc spec %v status %v", acct.Status, vpc.Spec, vpc.Status)
	}
	if route.Spec["vpc_id"] != vpc.Status["vpc_id"] || route.Spec["tgw_id"] != tgw.Status["tgw_id"] || route.Status["route_id"] == nil {
		t.Errorf("route spec %v, status %v; vpc status %v, tgw status %v", route.Spec, route.Status, vpc.Status, tgw.Status)
	}

	if store != nil {
		waitFor(t, 20*time.Second, "statussink to write generation 1", func() bool {
			return slices.Equal(sinkKeys(t, store, bucket), []string{"status/" + root + "-1.json"})
		})
	}

	// The updated BOM drops payments/fraud and adds payments/refunds.
	ubom := updated.Resources[0]
	if code := s.applyResource(ubom); code != 200 {
		t.Fatalf("apply updated BOM = %d, want 200", code)
	}
	uwant := bomChildren(ubom)
	s.waitClassicConverged(root, uwant, 40*time.Second)
	var pruned []string
	for k := range want {
		if !uwant[k] {
			pruned = append(pruned, k)
			if code, _ := s.call("GET", "/resources/"+k, nil); code != 404 {
				t.Errorf("pruned %s = %d, want 404", k, code)
			}
		}
	}
	if len(pruned) != 3 {
		t.Errorf("the updated BOM pruned %v, want one team's account, vpc and route", pruned)
	}
	log := p.teardowns(t)
	for _, k := range pruned {
		if firstIndex(log, k) < 0 {
			t.Errorf("pruned %s went without its teardown; log %v", k, log)
		}
	}
	pr := root + "-payments-fraud"
	assertBefore(t, log, "route/"+pr, "vpc/"+pr)
	assertBefore(t, log, "vpc/"+pr, "account/"+pr)

	if store != nil {
		waitFor(t, 20*time.Second, "statussink to write generation 2", func() bool {
			return slices.Equal(sinkKeys(t, store, bucket), []string{"status/" + root + "-1.json", "status/" + root + "-2.json"})
		})
		obj, err := store.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("status/" + root + "-2.json")})
		must(t, err)
		var doc struct {
			Generation int64
			Status     struct{ Ready, Total int }
		}
		must(t, json.NewDecoder(obj.Body).Decode(&doc))
		_ = obj.Body.Close()
		if doc.Generation != 2 || doc.Status.Total != len(uwant) || doc.Status.Ready != len(uwant) {
			t.Errorf("statussink object %+v, want generation 2 with %d of %d ready", doc, len(uwant), len(uwant))
		}
	}

	// Deleting the root tears everything down, dependents first, root last.
	if code, body := s.call("DELETE", "/resources/classicbom/"+root, nil); code != 202 {
		t.Fatalf("delete root = %d %s", code, body)
	}
	waitFor(t, 40*time.Second, "the tree to be gone", func() bool {
		code, _ := s.call("GET", "/resources/classicbom/"+root, nil)
		return code == 404
	})
	for k := range uwant {
		if code, _ := s.call("GET", "/resources/"+k, nil); code != 404 {
			t.Errorf("%s survived its root's delete: %d", k, code)
		}
	}
	log = p.teardowns(t)
	after := log[firstIndex(log, "account/"+pr)+1:]
	for k := range uwant {
		if firstIndex(after, k) < 0 {
			t.Errorf("%s went without its teardown", k)
		}
	}
	for k := range uwant {
		kind, name, _ := strings.Cut(k, "/")
		switch kind {
		case "route":
			assertBefore(t, after, k, "vpc/"+name)
			dom := name[:strings.LastIndex(name, "-")]
			assertBefore(t, after, k, "tgw/"+dom)
		case "vpc":
			assertBefore(t, after, k, "account/"+name)
		case "tgw":
			assertBefore(t, after, k, "account/"+name+"-tgw-host")
		}
		assertBefore(t, after, k, "classicbom/"+root)
	}
	if after[len(after)-1] != "classicbom/"+root {
		t.Errorf("the root was not torn down last: %v", after)
	}
	s.checkInvariants()
}

// assertBefore fails unless a's first teardown precedes b's.
func assertBefore(t *testing.T, log []string, a, b string) {
	t.Helper()
	ia, ib := firstIndex(log, a), firstIndex(log, b)
	if ia < 0 || ib < 0 || ia > ib {
		t.Errorf("teardown of %s (at %d) should precede %s (at %d); log %v", a, ia, b, ib, log)
	}
}

// TestClassicDemoUnderFaults converges the small BOM while 30% of the leaves'
// tasks fail transiently.
func TestClassicDemoUnderFaults(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	bin := buildClassicProvider(t)
	o := classicObjectsOf(t, bin, "small")
	o.Bindings = nil // statussink is covered by TestClassicDemo
	s.startClassicProvider(bin, o.Manifests, "FAKE_FAULT_RATE=0.3")
	s.applyClassic(o, "")
	s.applyResource(o.Resources[0])
	s.waitClassicConverged(o.Resources[0]["name"].(string), bomChildren(o.Resources[0]), 50*time.Second)
	// The faults happened: some leaf needed more than one attempt.
	if n := s.count(`SELECT count(*) FROM resource_events WHERE type = 'failed'`); n == 0 {
		t.Error("no task failed at FAKE_FAULT_RATE=0.3")
	}
	s.checkInvariants()
}

// TestClassicVersioning replays reference 004's versioning walkthrough over
// HTTP against the classic provider: vpc v1 and v2 resources converge on
// their own version (v2 echoes its region into status), a v1 resource flips
// in place to v2 (same id) once its spec has a region, and a vpc pinned to
// a version no endpoint serves parks with the reason until one does.
func TestClassicVersioning(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	bin := buildClassicProvider(t)
	o := classicObjectsOf(t, bin, "small")
	s.applyClassic(classicObjects{Manifests: o.Manifests, ProviderConfigs: o.ProviderConfigs}, "")
	s.startClassicProvider(bin, o.Manifests)

	fixture := func(name string) map[string]any {
		b, err := os.ReadFile("../examples/classic/testfixtures/" + name)
		must(t, err)
		var r map[string]any
		must(t, json.Unmarshal(b, &r))
		return r
	}
	v1, v2 := fixture("versioning/resource-vpc-v1-tagged.json"), fixture("resource-vpc-v2.json")
	for _, r := range []map[string]any{v1, v2} {
		if code := s.applyResource(r); code != 201 {
			t.Fatalf("apply %s = %d", r["name"], code)
		}
	}
	s.waitReady("vpc/sample-vpc-tagged")
	s.waitReady("vpc/sample-vpc-v2")
	before, _ := s.detail("vpc/sample-vpc-tagged")
	if strings.Contains(string(before.Status), "region") {
		t.Errorf("a v1 vpc's status has a region: %s", before.Status)
	}
	if d, _ := s.detail("vpc/sample-vpc-v2"); !strings.Contains(string(d.Status), `"region":"us-west-2"`) && !strings.Contains(string(d.Status), `"region": "us-west-2"`) {
		t.Errorf("the v2 vpc's status = %s, want its region echoed", d.Status)
	}

	// The flip: without a region it is refused and nothing changes; with
	// one it is the same resource at v2, reconciled by the v2 code.
	if code, body := s.call("POST", "/resources", fixture("versioning/resource-vpc-flip-to-v2-incomplete.json")); code != 400 ||
		!strings.Contains(string(body), "region") {
		t.Errorf("flip without region = %d %s, want 400 naming the region", code, body)
	}
	if d, _ := s.detail("vpc/sample-vpc-tagged"); d.KindVersion != 1 || d.Generation != before.Generation {
		t.Errorf("a refused flip changed the vpc: v%d, generation %d", d.KindVersion, d.Generation)
	}
	if code := s.applyResource(fixture("versioning/resource-vpc-flip-to-v2.json")); code != 200 {
		t.Fatalf("flip = %d, want 200", code)
	}
	var after resourceDetail
	waitFor(t, 30*time.Second, "the flipped vpc Ready at v2", func() bool {
		after, _ = s.detail("vpc/sample-vpc-tagged")
		return after.KindVersion == 2 && after.PhaseOf() == "Ready" && strings.Contains(string(after.Status), "us-west-2")
	})
	if after.ID != before.ID || after.Generation != before.Generation+1 {
		t.Errorf("flip: id %s -> %s, generation %d -> %d; want the same id and one more generation",
			before.ID, after.ID, before.Generation, after.Generation)
	}

	// Strict routing: a vpc/3 nobody serves parks with the reason.
	v3 := map[string]any{"kind": "vpc", "kind_version": 3, "description": "vpc/v3, served by no endpoint",
		"reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status"]}]`)}
	if code, body := s.call("PUT", "/kinds/vpc/manifest", v3); code != 201 {
		t.Fatalf("vpc v3 manifest = %d %s", code, body)
	}
	if code := s.applyResource(map[string]any{"kind": "vpc", "kind_version": 3, "name": "vpc-three"}); code != 201 {
		t.Fatalf("apply vpc-three = %d", code)
	}
	var parked struct {
		Phase  string `json:"phase"`
		Parked string `json:"parked"`
	}
	waitFor(t, 20*time.Second, "vpc-three parked with a reason", func() bool {
		_, body := s.call("GET", "/resources/vpc/vpc-three", nil)
		return json.Unmarshal(body, &parked) == nil && parked.Parked != ""
	})
	if parked.Phase != "Reconciling" || !strings.Contains(parked.Parked, "vpc") {
		t.Errorf("vpc-three = %+v", parked)
	}
	s.checkInvariants()
}
