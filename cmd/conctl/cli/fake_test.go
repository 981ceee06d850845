package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeAPI is a small in-memory stand-in for the converge REST API, just
// enough for the CLI's unit tests: it stores what is applied, answers gets,
// filtered and paged lists and deletes, and records every request. The real
// server is exercised by the end-to-end tests.
type fakeAPI struct {
	t *testing.T

	mu        sync.Mutex
	requests  []recordedRequest
	manifests map[string]map[string]any // kind/v
	configs   map[string]map[string]any // kind/v
	resources map[string]map[string]any // kind/name
	named     map[string]map[string]map[string]any
	fail      map[string]problem // "METHOD /api/v1/path" → forced answer
	nextID    int
}

type recordedRequest struct {
	Method string
	Path   string // decoded, without /api/v1
	Query  url.Values
	Header http.Header
	Body   []byte
}

type problem struct {
	Status int
	Detail string
	Errors []ProblemError
}

// fakeCreatedAt is the created_at of every fake object.
var fakeCreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newFakeAPI(t *testing.T) (*fakeAPI, *httptest.Server) {
	t.Helper()
	f := &fakeAPI{
		t:         t,
		manifests: map[string]map[string]any{},
		configs:   map[string]map[string]any{},
		resources: map[string]map[string]any{},
		named: map[string]map[string]map[string]any{
			"providerconfigs": {}, "reactor-bindings": {}, "endpoints": {},
		},
		fail: map[string]problem{},
	}
	mux := http.NewServeMux()
	p := APIPrefix
	mux.HandleFunc("GET "+p+"/version", func(w http.ResponseWriter, r *http.Request) {
		writeJSONAnswer(w, 200, map[string]any{"version": "v0.1.0-fake", "commit": "abc123"})
	})
	mux.HandleFunc("PUT "+p+"/kinds/{kind}/manifest", f.putManifest)
	mux.HandleFunc("GET "+p+"/kinds/{kind}/versions/{v}/manifest", f.getManifest)
	mux.HandleFunc("DELETE "+p+"/kinds/{kind}/versions/{v}/manifest", f.deleteManifest)
	mux.HandleFunc("GET "+p+"/manifests", f.listManifests)
	mux.HandleFunc("GET "+p+"/kinds", f.listKinds)
	mux.HandleFunc("GET "+p+"/kinds/{kind}/versions/{v}/config", f.getConfig)
	mux.HandleFunc("PUT "+p+"/kinds/{kind}/versions/{v}/config", f.putConfig)
	mux.HandleFunc("POST "+p+"/resources", f.applyResource)
	mux.HandleFunc("GET "+p+"/resources", f.listResources)
	mux.HandleFunc("GET "+p+"/resources/{kind}/{name}", f.getResource)
	mux.HandleFunc("DELETE "+p+"/resources/{kind}/{name}", f.deleteResource)
	for coll := range f.named {
		mux.HandleFunc("POST "+p+"/"+coll, f.applyNamed(coll))
		mux.HandleFunc("GET "+p+"/"+coll, f.listNamed(coll))
		mux.HandleFunc("GET "+p+"/"+coll+"/{name}", f.getNamed(coll))
		mux.HandleFunc("DELETE "+p+"/"+coll+"/{name}", f.deleteNamed(coll))
	}
	mux.HandleFunc("POST "+p+"/endpoints/{name}/rotate-secret", f.rotateSecret)

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		f.mu.Lock()
		f.requests = append(f.requests, recordedRequest{
			Method: r.Method, Path: strings.TrimPrefix(r.URL.Path, APIPrefix),
			Query: r.URL.Query(), Header: r.Header.Clone(), Body: body,
		})
		forced, isForced := f.fail[r.Method+" "+r.URL.Path]
		f.mu.Unlock()
		rec := httptest.NewRecorder()
		if isForced {
			writeProblem(rec, forced)
		} else {
			mux.ServeHTTP(rec, r)
		}
		t.Logf("fake API: %s %s %s -> %d %s %s", r.Method, r.URL.RequestURI(), body,
			rec.Code, rec.Header().Get("X-Apply-Result"), bytes.TrimSpace(rec.Body.Bytes()))
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(srv.Close)
	return f, srv
}

// failWith makes the fake answer method+path (under /api/v1) with a problem.
func (f *fakeAPI) failWith(method, path string, p problem) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[method+" "+APIPrefix+path] = p
}

func (f *fakeAPI) recorded() []recordedRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

func writeJSONAnswer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeProblem(w http.ResponseWriter, p problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"title": http.StatusText(p.Status), "status": p.Status, "detail": p.Detail, "errors": p.Errors,
	})
}

func decodeBody(w http.ResponseWriter, r *http.Request) (map[string]any, bool) {
	var m map[string]any
	dec := json.NewDecoder(r.Body)
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || m == nil {
		writeProblem(w, problem{Status: 400, Detail: "malformed JSON body"})
		return nil, false
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		writeProblem(w, problem{Status: 415, Detail: "want application/json, got " + ct})
		return nil, false
	}
	return m, true
}

// requireFields answers 422 naming each missing field.
func requireFields(w http.ResponseWriter, m map[string]any, names ...string) bool {
	var errs []ProblemError
	for _, n := range names {
		if m[n] == nil || m[n] == "" {
			errs = append(errs, ProblemError{Location: "body." + n, Message: "required property is missing"})
		}
	}
	if len(errs) > 0 {
		writeProblem(w, problem{Status: 422, Detail: "validation failed", Errors: errs})
		return false
	}
	return true
}

// upsert stores v under key and answers created/configured/unchanged.
func upsert(store map[string]map[string]any, key string, v map[string]any) (result string, stored map[string]any) {
	old, ok := store[key]
	switch {
	case !ok:
		result = "created"
	case reflect.DeepEqual(strip(old), strip(v)):
		return "unchanged", old
	default:
		result = "configured"
	}
	store[key] = v
	return result, v
}

// strip drops server-owned fields before comparing.
func strip(m map[string]any) map[string]any {
	c := map[string]any{}
	for k, v := range m {
		switch k {
		case "id", "generation", "synced_gen", "phase", "status", "created_at":
		default:
			c[k] = v
		}
	}
	return c
}

func answerApply(w http.ResponseWriter, result string, v any) {
	w.Header().Set("X-Apply-Result", result)
	status := 200
	if result == "created" {
		status = 201
	}
	writeJSONAnswer(w, status, v)
}

func (f *fakeAPI) putManifest(w http.ResponseWriter, r *http.Request) {
	m, ok := decodeBody(w, r)
	if !ok || !requireFields(w, m, "kind", "kind_version") {
		return
	}
	if m["kind"] != r.PathValue("kind") {
		writeProblem(w, problem{Status: 422, Detail: "body kind does not match the path"})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	res, v := upsert(f.manifests, fmt.Sprintf("%s/%s", m["kind"], m["kind_version"]), m)
	answerApply(w, res, v)
}

func (f *fakeAPI) getManifest(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.manifests[r.PathValue("kind")+"/"+r.PathValue("v")]
	if !ok {
		writeProblem(w, problem{Status: 404, Detail: fmt.Sprintf("no manifest %s/v%s", r.PathValue("kind"), r.PathValue("v"))})
		return
	}
	writeJSONAnswer(w, 200, m)
}

func (f *fakeAPI) deleteManifest(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := r.PathValue("kind") + "/" + r.PathValue("v")
	if _, ok := f.manifests[key]; !ok {
		writeProblem(w, problem{Status: 404, Detail: "no manifest " + key})
		return
	}
	delete(f.manifests, key)
	w.WriteHeader(204)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (f *fakeAPI) listManifests(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	items := []any{}
	for _, k := range sortedKeys(f.manifests) {
		m := f.manifests[k]
		if kind := r.URL.Query().Get("kind"); kind != "" && m["kind"] != kind {
			continue
		}
		items = append(items, m)
	}
	writeJSONAnswer(w, 200, map[string]any{"items": items})
}

func (f *fakeAPI) listKinds(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	versions := map[string][]int{}
	for _, m := range f.manifests {
		n, _ := strconv.Atoi(fmt.Sprint(m["kind_version"]))
		k := m["kind"].(string)
		versions[k] = append(versions[k], n)
	}
	items := []any{}
	for _, k := range sortedKeys(versions) {
		slices.Sort(versions[k])
		items = append(items, map[string]any{"kind": k, "versions": versions[k]})
	}
	writeJSONAnswer(w, 200, map[string]any{"items": items})
}

func (f *fakeAPI) getConfig(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.configs[r.PathValue("kind")+"/"+r.PathValue("v")]
	if !ok {
		writeProblem(w, problem{Status: 404, Detail: "no such kind version"})
		return
	}
	writeJSONAnswer(w, 200, c)
}

func (f *fakeAPI) putConfig(w http.ResponseWriter, r *http.Request) {
	m, ok := decodeBody(w, r)
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	res, v := upsert(f.configs, r.PathValue("kind")+"/"+r.PathValue("v"), m)
	answerApply(w, res, v)
}

func (f *fakeAPI) applyResource(w http.ResponseWriter, r *http.Request) {
	m, ok := decodeBody(w, r)
	if !ok || !requireFields(w, m, "kind", "kind_version", "name") {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := fmt.Sprintf("%s/%s", m["kind"], m["name"])
	old, existed := f.resources[key]
	res, v := upsert(f.resources, key, m)
	switch res {
	case "created":
		f.nextID++
		v["id"] = fmt.Sprintf("r-%d", f.nextID)
		v["generation"], v["synced_gen"], v["phase"] = 1, 0, "Reconciling"
		v["created_at"] = fakeCreatedAt.Format(time.RFC3339)
	case "configured":
		if existed {
			gen, _ := strconv.Atoi(fmt.Sprint(old["generation"]))
			v["id"], v["created_at"], v["phase"] = old["id"], old["created_at"], old["phase"]
			v["generation"], v["synced_gen"] = gen+1, old["synced_gen"]
		}
	}
	answerApply(w, res, v)
}

func (f *fakeAPI) getResource(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := r.PathValue("kind") + "/" + r.PathValue("name")
	v, ok := f.resources[key]
	if !ok {
		writeProblem(w, problem{Status: 404, Detail: fmt.Sprintf("resource %s not found", key)})
		return
	}
	writeJSONAnswer(w, 200, v)
}

func (f *fakeAPI) deleteResource(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := r.PathValue("kind") + "/" + r.PathValue("name")
	v, ok := f.resources[key]
	if !ok {
		writeProblem(w, problem{Status: 404, Detail: fmt.Sprintf("resource %s not found", key)})
		return
	}
	v["phase"] = "Deleting"
	writeJSONAnswer(w, 202, v)
}

// listResources filters and pages by (kind, name), the cursor being the
// last key of the previous page.
func (f *fakeAPI) listResources(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 100
	if s := q.Get("limit"); s != "" {
		var err error
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 {
			writeProblem(w, problem{Status: 422, Detail: "bad limit",
				Errors: []ProblemError{{Location: "query.limit", Message: "must be >= 1", Value: s}}})
			return
		}
	}
	selector := map[string]string{}
	if s := q.Get("label_selector"); s != "" {
		for _, pair := range strings.Split(s, ",") {
			k, v, _ := strings.Cut(pair, "=")
			selector[k] = v
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	items := []any{}
	next := ""
	for _, key := range sortedKeys(f.resources) {
		v := f.resources[key]
		switch {
		case q.Get("cursor") != "" && key <= q.Get("cursor"),
			q.Get("kind") != "" && v["kind"] != q.Get("kind"),
			q.Get("kind_version") != "" && fmt.Sprint(v["kind_version"]) != q.Get("kind_version"),
			q.Has("phase") && !slices.Contains(q["phase"], fmt.Sprint(v["phase"])),
			q.Get("owner") != "" && v["owner_id"] != q.Get("owner"):
			continue
		}
		labels, _ := v["labels"].(map[string]any)
		match := true
		for k, want := range selector {
			if labels[k] != want {
				match = false
			}
		}
		if !match {
			continue
		}
		if len(items) == limit {
			next = keyOf(items[len(items)-1])
			break
		}
		items = append(items, v)
	}
	out := map[string]any{"items": items}
	if next != "" {
		out["next_cursor"] = next
	}
	writeJSONAnswer(w, 200, out)
}

func keyOf(v any) string {
	m := v.(map[string]any)
	return fmt.Sprintf("%s/%s", m["kind"], m["name"])
}

func (f *fakeAPI) applyNamed(coll string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		m, ok := decodeBody(w, r)
		if !ok || !requireFields(w, m, "name") {
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		res, v := upsert(f.named[coll], m["name"].(string), m)
		if coll == "endpoints" && res == "created" {
			answer := map[string]any{}
			for k, x := range v {
				answer[k] = x
			}
			answer["secret"] = "whsec_Zm9vYmFyYmF6cXV4cXV1eGNvcmdl"
			answerApply(w, res, answer)
			return
		}
		answerApply(w, res, v)
	}
}

func (f *fakeAPI) listNamed(coll string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		f.mu.Lock()
		defer f.mu.Unlock()
		items := []any{}
		for _, k := range sortedKeys(f.named[coll]) {
			v := f.named[coll][k]
			switch {
			case q.Get("kind") != "" && v["kind"] != q.Get("kind"),
				q.Get("kind_version") != "" && fmt.Sprint(v["kind_version"]) != q.Get("kind_version"),
				q.Get("default") != "" && fmt.Sprint(v["is_default"] == true) != q.Get("default"):
				continue
			}
			items = append(items, v)
		}
		writeJSONAnswer(w, 200, map[string]any{"items": items})
	}
}

func (f *fakeAPI) getNamed(coll string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		v, ok := f.named[coll][r.PathValue("name")]
		if !ok {
			writeProblem(w, problem{Status: 404, Detail: fmt.Sprintf("%s %q not found", coll, r.PathValue("name"))})
			return
		}
		writeJSONAnswer(w, 200, v)
	}
}

func (f *fakeAPI) deleteNamed(coll string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.named[coll][r.PathValue("name")]; !ok {
			writeProblem(w, problem{Status: 404, Detail: fmt.Sprintf("%s %q not found", coll, r.PathValue("name"))})
			return
		}
		delete(f.named[coll], r.PathValue("name"))
		w.WriteHeader(204)
	}
}

func (f *fakeAPI) rotateSecret(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.named["endpoints"][r.PathValue("name")]; !ok {
		writeProblem(w, problem{Status: 404, Detail: "endpoint not found"})
		return
	}
	writeJSONAnswer(w, 200, map[string]any{"name": r.PathValue("name"), "secret": "whsec_cm90YXRlZHJvdGF0ZWRyb3RhdGVk"})
}
