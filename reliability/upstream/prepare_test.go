package upstream_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"text/template"
)

// prepare copies the suite's module from the module cache into a temporary
// directory, adapts its tests there, and builds its test binary. It returns
// the package directory and the binary.
func prepare(t *testing.T, root string, s suite) (pkgDir, bin string) {
	t.Helper()
	src := moduleDir(t, s.module, s.version)
	work := t.TempDir()
	dst := filepath.Join(work, "module")
	if err := copyTree(src, dst); err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
	pkgDir = dst // both suites test their module's root package

	p, err := parseTestPackage(pkgDir)
	if err != nil {
		t.Fatal(err)
	}
	internal, external := p.rewriteNewClient()
	if internal+external == 0 {
		t.Fatalf("%s: %v", s.module, errNoRewrite)
	}
	notes := []string{fmt.Sprintf("%s( calls replaced by %s(: %d in package %s's test files, %d in package %s_test's",
		"NewClient", newClientFunc, internal, p.name, external, p.name)}
	if s.adapt != nil {
		more, err := s.adapt(p)
		if err != nil {
			t.Fatalf("adapt %s %s: %v", s.module, s.version, err)
		}
		notes = append(notes, more...)
	}
	if err := p.write(); err != nil {
		t.Fatal(err)
	}
	data := map[string]any{
		"Module": s.module, "Version": s.version, "Package": p.name, "ImportPath": s.module,
		"Internal": internal > 0, "NewClientFunc": newClientFunc,
		"ModeEnv": modeEnv, "ScheduleEnv": scheduleEnv, "DebugEnv": DebugEnv, "AddrEnv": addrEnv, "RefusedMarker": refusedMarker,
	}
	writeTemplate(t, filepath.Join(pkgDir, "zz_lockwatch_external_test.go"), externalTmpl, data)
	if internal > 0 {
		writeTemplate(t, filepath.Join(pkgDir, "zz_lockwatch_internal_test.go"), internalTmpl, data)
	}
	for _, n := range notes {
		t.Logf("adapted: %s", n)
	}

	args := []string{"mod", "edit",
		"-require=" + lockwatchModule + "@v0.0.0-00010101000000-000000000000",
		"-replace=" + lockwatchModule + "=" + root}
	for _, m := range s.dropRequire {
		args = append(args, "-droprequire="+m)
	}
	goCmd(t, dst, args...)
	// lockwatch's own checksums, so that its requirements need no lookup.
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dst, "go.sum"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(sums); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(work, "suite.test")
	goCmd(t, pkgDir, "test", "-c", "-vet=off", "-o", bin, ".")
	versions := goCmd(t, pkgDir, "list", "-m", "-f", "{{.Path}} {{if .Main}}(the module under test){{else}}{{.Version}}{{end}}",
		"github.com/redis/go-redis/v9", "github.com/bsm/redislock", "github.com/go-redsync/redsync/v4")
	t.Logf("%s %s from %s; modules in the build: %s", s.module, s.version, src,
		strings.Join(strings.Split(strings.TrimSpace(versions), "\n"), ", "))
	return pkgDir, bin
}

// moduleDir downloads module@version (or finds it in the module cache) and
// returns its directory there.
func moduleDir(t *testing.T, module, version string) string {
	t.Helper()
	// Outside any module: nothing of this repository's go.mod or go.sum is involved.
	out := goCmd(t, t.TempDir(), "mod", "download", "-json", module+"@"+version)
	var info struct{ Dir, Error string }
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("go mod download %s@%s: %v\n%s", module, version, err, out)
	}
	if info.Error != "" || info.Dir == "" {
		t.Fatalf("go mod download %s@%s: %s", module, version, info.Error)
	}
	return info.Dir
}

// goCmd runs the go command in dir and returns its standard output; it
// fails t with the command's output if it fails. Inside a module, -mod=mod
// lets the copies' go.mod and go.sum take what the adapted tests need.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
		cmd.Env = append(cmd.Env, "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"))
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go %s (in %s): %v\n%s%s", strings.Join(args, " "), dir, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// copyTree copies the regular files under src to dst, writable.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}

func writeTemplate(t *testing.T, path, text string, data any) {
	t.Helper()
	tmpl, err := template.New(filepath.Base(path)).Option("missingkey=error").Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// repoRoot returns the directory of this repository's go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	data, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("module "+lockwatchModule+"\n")) {
		t.Fatalf("%s is not lockwatch's go.mod", gomod)
	}
	return filepath.Dir(gomod)
}
