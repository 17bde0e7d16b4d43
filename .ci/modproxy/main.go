// Command modproxy writes a file-system Go module proxy (GOPROXY=file://DIR)
// that serves modules of this checkout at one version, as a module proxy
// serves a tagged release: for each module, DIR/<module>/@v/list,
// <version>.info, <version>.mod and <version>.zip.
//
// Usage (from the repository root):
//
//	go run ./.ci/modproxy -o DIR -version v0.1.0 . extra/lockwatchprom extra/lockwatchotel
//
// A module's zip holds the files git would commit from its directory (those
// tracked or not ignored, as they are in the work tree), under
// <module>@<version>/, less what the go command leaves out of a module:
// subdirectories that hold a module of their own (a go.mod), vendor/, and
// anything that is not a regular file. The go command checks the zip's
// layout when it downloads the module.
//
// It uses the standard library only, so that the modules it packs depend on
// nothing for it.
package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

func main() {
	out := flag.String("o", "", "write the proxy to `dir`")
	version := flag.String("version", "v0.1.0", "the `version` every module is served at")
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: modproxy -o dir [-version v0.1.0] moduledir...")
		os.Exit(2)
	}
	for _, dir := range flag.Args() {
		mod, err := pack(*out, dir, *version)
		if err != nil {
			fmt.Fprintf(os.Stderr, "modproxy: %s: %v\n", dir, err)
			os.Exit(1)
		}
		fmt.Printf("%s@%s from %s\n", mod, *version, dir)
	}
}

// semver is the form of a release version this command serves.
var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// modulePath reads the module path from a go.mod.
var modulePath = regexp.MustCompile(`(?m)^module\s+"?([^\s"]+)"?\s*$`)

// pack writes the module in dir to the proxy at out, at version, and
// returns its path.
func pack(out, dir, version string) (string, error) {
	if !semver.MatchString(version) {
		return "", fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH", version)
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", err
	}
	m := modulePath.FindSubmatch(gomod)
	if m == nil {
		return "", errors.New("go.mod names no module")
	}
	mod := string(m[1])
	if strings.ToLower(mod) != mod {
		return "", fmt.Errorf("module %s: upper-case letters need the proxy's !-escaping, which this command does not do", mod)
	}
	if major := semver.FindStringSubmatch(version)[1]; major != "0" && major != "1" && !strings.HasSuffix(mod, "/v"+major) {
		return "", fmt.Errorf("module %s cannot be served at %s: its path lacks /v%s", mod, version, major)
	}
	files, err := moduleFiles(dir)
	if err != nil {
		return "", err
	}

	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	for _, f := range files {
		w, err := zw.Create(mod + "@" + version + "/" + f)
		if err != nil {
			return "", err
		}
		src, err := os.Open(filepath.Join(dir, filepath.FromSlash(f)))
		if err != nil {
			return "", err
		}
		_, err = io.Copy(w, src)
		src.Close()
		if err != nil {
			return "", err
		}
	}
	if err := zw.Close(); err != nil {
		return "", err
	}

	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return "", err
	}
	vdir := filepath.Join(out, filepath.FromSlash(mod), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": info,
		version + ".mod":  gomod,
		version + ".zip":  zb.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return mod, nil
}

// moduleFiles lists, slash-separated and relative to dir, the files of
// the module in dir.
func moduleFiles(dir string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", ".")
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	list, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	nested := map[string]bool{} // directory -> holds a go.mod of its own
	inNested := func(f string) bool {
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			has, ok := nested[d]
			if !ok {
				_, err := os.Stat(filepath.Join(dir, filepath.FromSlash(d), "go.mod"))
				has = err == nil
				nested[d] = has
			}
			if has {
				return true
			}
		}
		return false
	}
	var files []string
	seen := map[string]bool{}
	for _, f := range strings.Split(string(list), "\x00") {
		if f == "" || seen[f] || f == "vendor" || strings.HasPrefix(f, "vendor/") || inNested(f) {
			continue
		}
		seen[f] = true
		fi, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(f)))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree
		}
		if err != nil {
			return nil, err
		}
		if fi.Mode().IsRegular() {
			files = append(files, f)
		}
	}
	return files, nil
}
