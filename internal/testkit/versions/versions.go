// Package versions reads the upstream versions lockwatch is tested with:
// the minimums in go.mod, and the newest releases named in .ci/newest.txt.
// Only lockwatch's own tests use it.
package versions

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// List maps a module path to a version.
type List map[string]string

// Root returns the repository's root, found from dir upwards by its go.mod
// that declares module github.com/lockwatch/lockwatch.
func Root(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/lockwatch/lockwatch\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("versions: no lockwatch go.mod above %s", dir)
		}
	}
}

// Minimums returns the requirements of root's go.mod, indirect ones
// included.
func Minimums(root string) (List, error) {
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := List{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "require (":
			in = true
			continue
		case in && line == ")":
			in = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !in:
			continue
		}
		if fields := strings.Fields(line); len(fields) >= 2 {
			out[fields[0]] = fields[1]
		}
	}
	return out, sc.Err()
}

// Newest returns the list in root's .ci/newest.txt.
func Newest(root string) (List, error) {
	b, err := os.ReadFile(filepath.Join(root, ".ci", "newest.txt"))
	if err != nil {
		return nil, err
	}
	out := List{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) == 2 && fields[0] == ToolchainLine {
			continue // the newest Go, see Toolchain
		}
		if len(fields) != 2 || !strings.HasPrefix(fields[1], "v") {
			return nil, fmt.Errorf("versions: .ci/newest.txt line %d: want \"module version\", got %q", i+1, line)
		}
		out[fields[0]] = fields[1]
	}
	return out, nil
}

// ToolchainLine is the first word of .ci/newest.txt's line that names
// the newest Go toolchain CI tests (GOTOOLCHAIN), as "toolchain go1.27.3".
const ToolchainLine = "toolchain"

// Toolchain returns the newest Go toolchain root's .ci/newest.txt names
// ("go1.27.3"), or "" when it names none.
func Toolchain(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, ".ci", "newest.txt"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if fields := strings.Fields(line); len(fields) == 2 && fields[0] == ToolchainLine {
			if !strings.HasPrefix(fields[1], "go1.") {
				return "", fmt.Errorf("versions: .ci/newest.txt: toolchain %q, want go1.N.M", fields[1])
			}
			return fields[1], nil
		}
	}
	return "", nil
}

// Compare compares two versions "vMAJOR.MINOR.PATCH" (a pre-release or
// build suffix is ignored) and returns -1, 0 or +1.
func Compare(a, b string) int {
	pa, pb := parts(a), parts(b)
	for i := range pa {
		if pa[i] != pb[i] {
			if pa[i] < pb[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

func parts(v string) [3]int {
	var p [3]int
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	for i, f := range strings.SplitN(v, ".", 3) {
		n := 0
		for _, c := range f {
			if c < '0' || c > '9' {
				break
			}
			n = n*10 + int(c-'0')
		}
		p[i] = n
	}
	return p
}
