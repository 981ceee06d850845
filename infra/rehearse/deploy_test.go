package rehearse

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	cftypes "github.com/aws/aws-sdk-go-v2/service/cloudformation/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// A stack is one template deployed by the rehearsal.
type stack struct {
	name     string
	bucket   string            // where its template (and code) is uploaded
	params   map[string]string // values for parameters without a default
	template template          // as written (synthesized or translated)
	deployed template          // as deployed: standIn's output
	leftOut  []leftOut
	physical map[string]string // logical ID -> physical ID, after a deploy
	listed   map[string]bool   // the logical IDs CloudFormation lists, after a deploy
	live     map[string]bool   // the logical IDs read back through their APIs, after a check

	// created are the types the stack must have resources of, read back;
	// declared, types moto cannot create that its template must declare.
	created, declared []string
}

// upload puts body at bucket/key.
func upload(t *testing.T, s3c *s3.Client, bucket, key string, body []byte) {
	t.Helper()
	if _, err := s3c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
		t.Fatalf("upload s3://%s/%s: %v", bucket, key, err)
	}
}

// zipDir zips dir's files under their paths relative to dir, in name order,
// as the CDK packages a directory asset.
func zipDir(t *testing.T, dir string) []byte {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, p := range files {
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: filepath.ToSlash(rel), Method: zip.Deflate, Modified: time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// placeholderZip stands in for a function package that was not built.
// Each call's package differs (it names the time it was made).
func placeholderZip(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create("README")
	_, _ = fmt.Fprintf(w, "placeholder made %s: make functions builds the real package\n", time.Now().Format(time.RFC3339Nano))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

var pseudo = strings.NewReplacer("${AWS::AccountId}", account, "${AWS::Region}", region, "${AWS::Partition}", "aws")

// publishAssets uploads every file asset of a cloud assembly's asset manifest
// (a directory zipped, a file as is) to its destination, as `cdk deploy`
// does, and returns the stack's template. Image assets are listed, not
// built: moto's ECS never pulls an image.
func publishAssets(t *testing.T, s3c *s3.Client, dir, stackName string) template {
	t.Helper()
	var manifest struct {
		Files map[string]struct {
			Source       struct{ Path, Packaging string }
			Destinations map[string]struct{ BucketName, ObjectKey string }
		}
		DockerImages map[string]struct{ DisplayName string }
	}
	readJSON(t, filepath.Join(dir, stackName+".assets.json"), &manifest)
	for _, a := range manifest.Files {
		p := filepath.Join(dir, a.Source.Path)
		var body []byte
		if a.Source.Packaging == "zip" {
			body = zipDir(t, p)
		} else {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			body = b
		}
		for _, d := range a.Destinations {
			upload(t, s3c, pseudo.Replace(d.BucketName), pseudo.Replace(d.ObjectKey), body)
		}
	}
	for h, img := range manifest.DockerImages {
		t.Logf("%s: image asset %s (%s) not built: moto's ECS does not pull images", stackName, h, img.DisplayName)
	}
	var tm template
	readJSON(t, filepath.Join(dir, stackName+".template.json"), &tm)
	return tm
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// parameters returns the stack's parameter values: st.params for those
// without a default (a missing one fails t), defaults left to CloudFormation.
func (st *stack) parameters(t *testing.T) []cftypes.Parameter {
	t.Helper()
	var out []cftypes.Parameter
	for name, p := range st.template.section("Parameters") {
		if v, ok := st.params[name]; ok {
			out = append(out, cftypes.Parameter{ParameterKey: aws.String(name), ParameterValue: aws.String(v)})
			continue
		}
		if _, ok := p.(map[string]any)["Default"]; !ok {
			t.Fatalf("%s: parameter %s has no default and the rehearsal gives it no value", st.name, name)
		}
	}
	return out
}

// deploy creates the stack (update: updates it) from st.template through
// standIn, uploaded to st.bucket, and waits until CloudFormation is done.
func (st *stack) deploy(t *testing.T, cf *cloudformation.Client, s3c *s3.Client, emulated map[string]bool, update bool) {
	t.Helper()
	ctx := context.Background()
	st.deployed, st.leftOut = standIn(st.template, emulated)
	body, err := json.Marshal(st.deployed)
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("rehearsal/%s-%d.template.json", st.name, time.Now().UnixNano())
	upload(t, s3c, st.bucket, key, body)
	url := aws.String(fmt.Sprintf("https://%s.s3.%s.amazonaws.com/%s", st.bucket, region, key))
	caps := []cftypes.Capability{cftypes.CapabilityCapabilityIam, cftypes.CapabilityCapabilityNamedIam, cftypes.CapabilityCapabilityAutoExpand}
	want := cftypes.StackStatusCreateComplete
	if update {
		want = cftypes.StackStatusUpdateComplete
		_, err = cf.UpdateStack(ctx, &cloudformation.UpdateStackInput{StackName: aws.String(st.name), TemplateURL: url, Parameters: st.parameters(t), Capabilities: caps})
	} else {
		_, err = cf.CreateStack(ctx, &cloudformation.CreateStackInput{StackName: aws.String(st.name), TemplateURL: url, Parameters: st.parameters(t), Capabilities: caps})
	}
	if err != nil {
		t.Fatalf("%s: deploy: %v", st.name, err)
	}
	if got := waitStack(t, cf, st.name); got != want {
		t.Fatalf("%s: stack is %s, want %s", st.name, got, want)
	}
	res, err := cf.ListStackResources(ctx, &cloudformation.ListStackResourcesInput{StackName: aws.String(st.name)})
	if err != nil {
		t.Fatal(err)
	}
	st.physical, st.listed = map[string]string{}, map[string]bool{}
	for _, r := range res.StackResourceSummaries {
		if id := aws.ToString(r.LogicalResourceId); id != "" && completed(r.ResourceStatus) {
			st.physical[id] = aws.ToString(r.PhysicalResourceId)
			st.listed[id] = true
		}
	}
	for id, r := range st.deployed.resources() {
		if _, ok := r["Condition"]; ok {
			continue
		}
		if !st.listed[id] {
			t.Errorf("%s: %s (%s) is in the template but CloudFormation lists no such resource complete", st.name, id, resType(r))
		}
	}
}

// waitStack polls the stack until no operation is in progress and returns
// its status (DELETE_COMPLETE once it is gone).
func waitStack(t *testing.T, cf *cloudformation.Client, name string) cftypes.StackStatus {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Minute); ; {
		out, err := cf.DescribeStacks(context.Background(), &cloudformation.DescribeStacksInput{StackName: aws.String(name)})
		var status cftypes.StackStatus
		switch {
		case err != nil && strings.Contains(err.Error(), "does not exist"):
			return cftypes.StackStatusDeleteComplete
		case err != nil:
			t.Fatalf("describe %s: %v", name, err)
		case len(out.Stacks) == 0:
			return cftypes.StackStatusDeleteComplete
		default:
			status = out.Stacks[0].StackStatus
		}
		if !strings.HasSuffix(string(status), "_IN_PROGRESS") {
			return status
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still %s after 5 minutes", name, status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// destroy deletes the stack and waits until it is gone.
func (st *stack) destroy(t *testing.T, cf *cloudformation.Client) error {
	t.Helper()
	if _, err := cf.DeleteStack(context.Background(), &cloudformation.DeleteStackInput{StackName: aws.String(st.name)}); err != nil {
		return fmt.Errorf("%s: delete: %w", st.name, err)
	}
	if got := waitStack(t, cf, st.name); got != cftypes.StackStatusDeleteComplete {
		return fmt.Errorf("%s: after delete the stack is %s", st.name, got)
	}
	return nil
}

// completed reports whether a resource's status says it exists and no
// operation on it failed or is under way.
func completed(s cftypes.ResourceStatus) bool {
	return strings.HasSuffix(string(s), "_COMPLETE") && !strings.HasPrefix(string(s), "DELETE")
}
