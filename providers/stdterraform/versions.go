package stdterraform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/go-version"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"

	"github.com/convergeplane/converge/webhooksdk"
)

// The CLIs config.binary names.
const (
	binTerraform = "terraform"
	binTofu      = "tofu"
)

// cli is the terraform (or tofu) binary a task runs, and the version it reports.
type cli struct {
	path    string
	name    string
	version string
}

// resolveCLI picks the binary for the module in run. With no versions directory it is
// the binary in PATH, as configured; with one, it is
// <versions_dir>/<binary>/<version>/<binary> for the version token spec.tf_version names,
// else the module's .terraform-version (.opentofu-version for tofu), else
// latest-allowed. Either way the binary must report the version it is filed under.
func (p *provider) resolveCLI(ctx context.Context, cfg config, token, run string) (cli, error) {
	name := cfg.Binary
	if name == "" {
		name = binTerraform
	}
	if name != binTerraform && name != binTofu {
		return cli{}, webhooksdk.Terminal(fmt.Errorf("config.binary: %q is neither %q nor %q", name, binTerraform, binTofu))
	}
	dir := cfg.VersionsDir
	if dir == "" {
		dir = p.versionsDir
	}
	if dir == "" {
		if token != "" {
			return cli{}, webhooksdk.Terminal(errors.New("spec.tf_version: no versions directory is configured (config.versions_dir)"))
		}
		bin := p.binary
		if name == binTofu {
			bin = binTofu
		}
		path, err := exec.LookPath(bin)
		if err != nil {
			return cli{}, fmt.Errorf("config.binary: %w", err)
		}
		return p.checkCLI(ctx, cli{path: path, name: name}, run)
	}
	if !filepath.IsAbs(dir) {
		return cli{}, webhooksdk.Terminal(fmt.Errorf("config.versions_dir: %q is not an absolute path", dir))
	}
	installed, err := installedVersions(filepath.Join(dir, name), name)
	if err != nil {
		return cli{}, err
	}
	field := "spec.tf_version"
	if token == "" {
		file := ".terraform-version"
		if name == binTofu {
			file = ".opentofu-version"
		}
		data, err := os.ReadFile(filepath.Join(run, file))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return cli{}, fmt.Errorf("%s: %w", file, err)
		}
		token, field = strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]), file
	}
	if token == "" {
		token, field = "latest-allowed", "required_version"
	}
	v, err := pickVersion(token, installed, run)
	if err != nil {
		return cli{}, webhooksdk.Terminal(fmt.Errorf("%s: %w", field, err))
	}
	c := cli{path: filepath.Join(dir, name, v.Original(), name), name: name, version: v.Original()}
	return p.checkCLI(ctx, c, run)
}

// checkCLI asks the binary its version (version -json): one filed under another version
// than it reports is a broken install.
func (p *provider) checkCLI(ctx context.Context, c cli, run string) (cli, error) {
	stdout := &capped{max: maxOutputs}
	w := &workdir{dir: run, bin: c.path}
	if out, err := p.tf(ctx, w, stdout, "version", "-json"); err != nil {
		return cli{}, fmt.Errorf("%s version: %w\n%s", c.path, err, out)
	}
	var v struct {
		Version string `json:"terraform_version"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &v); err != nil || v.Version == "" {
		return cli{}, fmt.Errorf("%s version -json: no terraform_version in %q", c.path, stdout.String())
	}
	if c.version != "" && v.Version != c.version {
		return cli{}, webhooksdk.Terminal(fmt.Errorf("%s reports version %s, not the %s it is installed as", c.path, v.Version, c.version))
	}
	c.version = v.Version
	return c, nil
}

// installedVersions lists the versions under dir (<dir>/<version>/<name>, executable),
// oldest first.
func installedVersions(dir, name string) ([]*version.Version, error) {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("config.versions_dir: %w", err)
	}
	var vs []*version.Version
	for _, e := range entries {
		v, err := version.NewSemver(e.Name())
		if err != nil || v.Original() != e.Name() {
			continue
		}
		if fi, err := os.Stat(filepath.Join(dir, e.Name(), name)); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return nil, fmt.Errorf("config.versions_dir: no %s installed under %s (want %s/<version>/%s)", name, dir, dir, name)
	}
	slices.SortFunc(vs, func(a, b *version.Version) int { return a.Compare(b) })
	return vs, nil
}

// pickVersion is the installed version token names: an exact version, latest,
// latest:<regex> (the newest whose version string the regular expression matches, as
// tfenv reads it), min-required or latest-allowed (the oldest or newest the module's
// required_version allows). Only an exact token picks a pre-release.
func pickVersion(token string, installed []*version.Version, module string) (*version.Version, error) {
	stable := func(v *version.Version) bool { return v.Prerelease() == "" }
	var match func(*version.Version) bool
	newest := true
	switch {
	case token == "latest":
		match = stable
	case strings.HasPrefix(token, "latest:"):
		re, err := regexp.Compile(strings.TrimPrefix(token, "latest:"))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", token, err)
		}
		match = func(v *version.Version) bool { return stable(v) && re.MatchString(v.Original()) }
	case token == "min-required" || token == "latest-allowed":
		cons, err := requiredVersion(module)
		if err != nil {
			return nil, err
		}
		match = func(v *version.Version) bool { return stable(v) && cons.Check(v) }
		newest = token == "latest-allowed"
	default:
		want, err := version.NewSemver(token)
		if err != nil {
			return nil, fmt.Errorf("%q is not a version nor one of latest, latest:<regex>, min-required, latest-allowed", token)
		}
		match = func(v *version.Version) bool { return v.Equal(want) && v.Prerelease() == want.Prerelease() }
	}
	var found *version.Version
	for _, v := range installed {
		if match(v) && (found == nil || newest) {
			found = v
		}
	}
	if found == nil {
		names := make([]string, len(installed))
		for i, v := range installed {
			names[i] = v.Original()
		}
		return nil, fmt.Errorf("no installed version fits %q (installed: %s)", token, strings.Join(names, ", "))
	}
	return found, nil
}

// requiredVersion is every required_version constraint in the module's root .tf and
// .tf.json files, all of which must hold; none is no constraint. A file that does not
// parse is passed over: terraform init reports it.
func requiredVersion(module string) (version.Constraints, error) {
	files, err := filepath.Glob(filepath.Join(module, "*.tf"))
	if err != nil {
		return nil, err
	}
	jsonFiles, err := filepath.Glob(filepath.Join(module, "*.tf.json"))
	if err != nil {
		return nil, err
	}
	parser := hclparse.NewParser()
	var all version.Constraints
	for _, path := range append(files, jsonFiles...) {
		var f *hcl.File
		var diags hcl.Diagnostics
		if strings.HasSuffix(path, ".json") {
			f, diags = parser.ParseJSONFile(path)
		} else {
			f, diags = parser.ParseHCLFile(path)
		}
		if diags.HasErrors() {
			continue
		}
		content, _, _ := f.Body.PartialContent(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "terraform"}}})
		for _, block := range content.Blocks {
			attrs, _, _ := block.Body.PartialContent(&hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "required_version"}}})
			attr, ok := attrs.Attributes["required_version"]
			if !ok {
				continue
			}
			val, diags := attr.Expr.Value(nil)
			if diags.HasErrors() || !val.Type().Equals(cty.String) || val.IsNull() {
				return nil, fmt.Errorf("%s: required_version is not a string", filepath.Base(path))
			}
			cons, err := version.NewConstraint(val.AsString())
			if err != nil {
				return nil, fmt.Errorf("%s: required_version: %w", filepath.Base(path), err)
			}
			all = append(all, cons...)
		}
	}
	return all, nil
}
