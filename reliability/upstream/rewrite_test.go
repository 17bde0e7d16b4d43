package upstream_test

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// goRedisV9 is the import path of go-redis v9, whose NewClient the upstream
// tests call to make the clients lockwatch must watch.
const goRedisV9 = "github.com/redis/go-redis/v9"

// newClientFunc is the function the rewritten tests call instead of
// go-redis's NewClient. The injected files define it: in the external test
// package (package p_test) it makes the client; in the package itself
// (package p) it calls the one the external test package hands it, since
// a file of package p cannot import lockwatch, whose adapters import p.
const newClientFunc = "lockwatchNewClient"

// testPackage is the _test.go files of one upstream package, parsed, as the
// runner adapts them.
type testPackage struct {
	dir   string
	fset  *token.FileSet
	name  string // the package's own name (internal test files use it)
	files map[string]*ast.File
	dirty map[string]bool // files changed since parsing
}

// parseTestPackage parses the _test.go files in dir.
func parseTestPackage(dir string) (*testPackage, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no _test.go files in %s", dir)
	}
	p := &testPackage{dir: dir, fset: token.NewFileSet(), files: map[string]*ast.File{}, dirty: map[string]bool{}}
	for _, name := range names {
		f, err := parser.ParseFile(p.fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		base := filepath.Base(name)
		p.files[base] = f
		pkg := strings.TrimSuffix(f.Name.Name, "_test")
		if p.name == "" {
			p.name = pkg
		} else if p.name != pkg {
			return nil, fmt.Errorf("%s: package %s, but other files are of package %s", name, f.Name.Name, p.name)
		}
	}
	return p, nil
}

// sortedNames returns the file names in order.
func (p *testPackage) sortedNames() []string {
	var names []string
	for name := range p.files {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// internal reports whether file name belongs to the package itself rather
// than to its external test package.
func (p *testPackage) internal(name string) bool {
	return !strings.HasSuffix(p.files[name].Name.Name, "_test")
}

// rewriteNewClient replaces every call of go-redis v9's NewClient in the
// test files by a call of newClientFunc with the same arguments. It returns
// how many calls it replaced in files of the package itself and in files of
// its external test package.
func (p *testPackage) rewriteNewClient() (internal, external int) {
	for _, name := range p.sortedNames() {
		f := p.files[name]
		local := importName(f, goRedisV9)
		if local == "" {
			continue
		}
		n := 0
		ast.Inspect(f, func(node ast.Node) bool {
			call, ok := node.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "NewClient" {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == local {
				call.Fun = &ast.Ident{NamePos: x.NamePos, Name: newClientFunc}
				n++
			}
			return true
		})
		if n == 0 {
			continue
		}
		p.dirty[name] = true
		if p.internal(name) {
			internal += n
		} else {
			external += n
		}
	}
	return internal, external
}

// importName returns the name file f refers to the package at path by, or
// "" if f does not import it.
func importName(f *ast.File, path string) string {
	for _, spec := range f.Imports {
		p, err := strconv.Unquote(spec.Path.Value)
		if err != nil || p != path {
			continue
		}
		if spec.Name != nil {
			return spec.Name.Name
		}
		return defaultImportName(p)
	}
	return ""
}

// defaultImportName guesses the name of the package at path: its last
// element, or the one before a major-version element ("v9"). Good enough for
// the imports of the upstream test files; a wrong guess keeps an unused
// import, which the build then reports.
func defaultImportName(path string) string {
	parts := strings.Split(path, "/")
	last := parts[len(parts)-1]
	if len(parts) > 1 && len(last) > 1 && last[0] == 'v' {
		if _, err := strconv.Atoi(last[1:]); err == nil {
			last = parts[len(parts)-2]
		}
	}
	if i := strings.LastIndexAny(last, ".-"); i >= 0 {
		last = last[i+1:]
	}
	return last
}

// keepCases narrows the map literal that function fn returns to the entries
// whose keys are in keep, and returns the keys it dropped. It fails unless
// every key of keep was found, so that a renamed case is noticed.
func (p *testPackage) keepCases(fn string, keep ...string) (dropped []string, err error) {
	decl, file := p.funcDecl(fn)
	if decl == nil {
		return nil, fmt.Errorf("no func %s in the test files", fn)
	}
	found := map[string]bool{}
	var lits int
	var target *ast.CompositeLit
	var kept []ast.Expr
	ast.Inspect(decl.Body, func(node ast.Node) bool {
		ret, ok := node.(*ast.ReturnStmt)
		if !ok || len(ret.Results) != 1 {
			return true
		}
		lit, ok := ret.Results[0].(*ast.CompositeLit)
		if !ok {
			return true
		}
		if _, ok := lit.Type.(*ast.MapType); !ok {
			return true
		}
		lits++
		target, kept, dropped = lit, nil, nil
		for _, e := range lit.Elts {
			kv, ok := e.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			key, ok := stringLit(kv.Key)
			if !ok {
				continue
			}
			if slices.Contains(keep, key) {
				found[key] = true
				kept = append(kept, e)
			} else {
				dropped = append(dropped, key)
			}
		}
		return false
	})
	if lits != 1 {
		return nil, fmt.Errorf("func %s: want one returned map literal, found %d", fn, lits)
	}
	for _, k := range keep {
		if !found[k] {
			return nil, fmt.Errorf("func %s: no case %q", fn, k)
		}
	}
	target.Elts = kept
	p.dirty[file] = true
	return dropped, nil
}

// dropConfigKey removes the entry of string key from every composite
// literal of type typ (such as "tempredis.Config") inside function fn, and
// returns how many it removed. A range loop of fn whose key variable is no
// longer used then loses it (for i := range n becomes for range n).
func (p *testPackage) dropConfigKey(fn, typ, key string) (int, error) {
	decl, file := p.funcDecl(fn)
	if decl == nil {
		return 0, fmt.Errorf("no func %s in the test files", fn)
	}
	n := 0
	ast.Inspect(decl.Body, func(node ast.Node) bool {
		lit, ok := node.(*ast.CompositeLit)
		if !ok || exprString(lit.Type) != typ {
			return true
		}
		var elts []ast.Expr
		for _, e := range lit.Elts {
			if kv, ok := e.(*ast.KeyValueExpr); ok {
				if k, ok := stringLit(kv.Key); ok && k == key {
					n++
					continue
				}
			}
			elts = append(elts, e)
		}
		lit.Elts = elts
		return true
	})
	if n == 0 {
		return 0, nil
	}
	p.dirty[file] = true
	ast.Inspect(decl.Body, func(node ast.Node) bool {
		rs, ok := node.(*ast.RangeStmt)
		if !ok || rs.Value != nil {
			return true
		}
		k, ok := rs.Key.(*ast.Ident)
		if !ok || rs.Tok != token.DEFINE {
			return true
		}
		used := false
		ast.Inspect(rs.Body, func(node ast.Node) bool {
			if id, ok := node.(*ast.Ident); ok && id.Name == k.Name {
				used = true
			}
			return !used
		})
		if !used {
			rs.Key, rs.Tok = nil, token.ILLEGAL
		}
		return true
	})
	return n, nil
}

// dropUnusedFuncs removes the top-level functions whose names start with
// prefix and that nothing in the test files refers to any longer, and
// returns their names.
func (p *testPackage) dropUnusedFuncs(prefix string) []string {
	var removed []string
	for progress := true; progress; {
		progress = false
		for _, name := range p.sortedNames() {
			f := p.files[name]
			var decls []ast.Decl
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, prefix) && !referencedElsewhere(p.files, fd) {
					removed = append(removed, fd.Name.Name)
					p.dirty[name] = true
					progress = true
					continue
				}
				decls = append(decls, d)
			}
			f.Decls = decls
		}
	}
	slices.Sort(removed)
	return removed
}

// referencedElsewhere reports whether any Ident other than fd's own name
// refers to fd's name.
func referencedElsewhere(files map[string]*ast.File, fd *ast.FuncDecl) bool {
	for _, f := range files {
		found := false
		ast.Inspect(f, func(node ast.Node) bool {
			if found {
				return false
			}
			if id, ok := node.(*ast.Ident); ok && id != fd.Name && id.Name == fd.Name.Name {
				found = true
			}
			return true
		})
		if found {
			return true
		}
	}
	return false
}

// pruneImports removes, from the changed files, imports that the file no
// longer refers to, and returns their paths.
func (p *testPackage) pruneImports() []string {
	var removed []string
	for _, name := range p.sortedNames() {
		if !p.dirty[name] {
			continue
		}
		f := p.files[name]
		used := map[string]bool{}
		ast.Inspect(f, func(node ast.Node) bool {
			if sel, ok := node.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok {
					used[x.Name] = true
				}
			}
			return true
		})
		var keep []*ast.ImportSpec
		for _, spec := range f.Imports {
			path, _ := strconv.Unquote(spec.Path.Value)
			local := defaultImportName(path)
			if spec.Name != nil {
				local = spec.Name.Name
			}
			if local == "_" || local == "." || used[local] {
				keep = append(keep, spec)
				continue
			}
			removed = append(removed, path)
		}
		if len(keep) == len(f.Imports) {
			continue
		}
		f.Imports = keep
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.IMPORT {
				continue
			}
			var specs []ast.Spec
			for _, s := range gd.Specs {
				if slices.Contains(keep, s.(*ast.ImportSpec)) {
					specs = append(specs, s)
				}
			}
			gd.Specs = specs
		}
		var decls []ast.Decl
		for _, d := range f.Decls {
			if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.IMPORT && len(gd.Specs) == 0 {
				continue
			}
			decls = append(decls, d)
		}
		f.Decls = decls
	}
	return removed
}

// write writes the changed files back, gofmt-ed.
func (p *testPackage) write() error {
	for _, name := range p.sortedNames() {
		if !p.dirty[name] {
			continue
		}
		// Comments of removed declarations would be printed at odd places:
		// keep only those inside what is left.
		f := p.files[name]
		f.Comments = keptComments(f)
		var buf bytes.Buffer
		if err := format.Node(&buf, p.fset, f); err != nil {
			return fmt.Errorf("format %s: %w", name, err)
		}
		path := filepath.Join(p.dir, name)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// keptComments returns the comment groups of f that lie within a
// declaration still in f, or before the first one (the file's header).
func keptComments(f *ast.File) []*ast.CommentGroup {
	var out []*ast.CommentGroup
	for _, cg := range f.Comments {
		if cg.End() < f.Name.Pos() {
			out = append(out, cg)
			continue
		}
		for _, d := range f.Decls {
			start := d.Pos()
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Doc != nil {
				start = fd.Doc.Pos()
			}
			if gd, ok := d.(*ast.GenDecl); ok && gd.Doc != nil {
				start = gd.Doc.Pos()
			}
			if cg.Pos() >= start && cg.End() <= d.End() {
				out = append(out, cg)
				break
			}
		}
	}
	return out
}

// funcDecl finds the top-level function named name and the file it is in.
func (p *testPackage) funcDecl(name string) (*ast.FuncDecl, string) {
	for _, fname := range p.sortedNames() {
		for _, d := range p.files[fname].Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.Name == name {
				return fd, fname
			}
		}
	}
	return nil, ""
}

// hasFunc reports whether the test files declare a top-level function name.
func (p *testPackage) hasFunc(name string) bool {
	fd, _ := p.funcDecl(name)
	return fd != nil
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// exprString prints a type expression such as tempredis.Config.
func exprString(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return exprString(x.X) + "." + x.Sel.Name
	}
	return ""
}

var errNoRewrite = errors.New("no call of go-redis v9's NewClient found")

// retryInWaitLoop makes the loops of function fn that wait for a call to
// succeed call it again: a statement v := f(...) followed by a loop
// for { if v == nil { break }; ... } that never assigns v waits forever
// once f fails. Each such loop gets v = f(...) at its end. It returns how
// many loops it changed (none when the loops call again already).
func (p *testPackage) retryInWaitLoop(fn string) (int, error) {
	decl, file := p.funcDecl(fn)
	if decl == nil {
		return 0, fmt.Errorf("no func %s in the test files", fn)
	}
	n := 0
	var err error
	ast.Inspect(decl.Body, func(node ast.Node) bool {
		blk, ok := node.(*ast.BlockStmt)
		if !ok || err != nil {
			return err == nil
		}
		for i := 0; i+1 < len(blk.List); i++ {
			as, ok := blk.List[i].(*ast.AssignStmt)
			if !ok || as.Tok != token.DEFINE || len(as.Lhs) != 1 || len(as.Rhs) != 1 {
				continue
			}
			v, isIdent := as.Lhs[0].(*ast.Ident)
			call, isCall := as.Rhs[0].(*ast.CallExpr)
			loop, isFor := blk.List[i+1].(*ast.ForStmt)
			if !isIdent || !isCall || !isFor || loop.Init != nil || loop.Cond != nil || loop.Post != nil ||
				len(loop.Body.List) == 0 || !breaksWhenNil(loop.Body.List[0], v.Name) || assigns(loop.Body, v.Name) {
				continue
			}
			var src bytes.Buffer
			if err = format.Node(&src, token.NewFileSet(), call); err != nil {
				return false
			}
			again, perr := parser.ParseExpr(src.String())
			if perr != nil {
				err = perr
				return false
			}
			loop.Body.List = append(loop.Body.List, &ast.AssignStmt{Lhs: []ast.Expr{ast.NewIdent(v.Name)}, Tok: token.ASSIGN, Rhs: []ast.Expr{again}})
			n++
		}
		return true
	})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", fn, err)
	}
	if n > 0 {
		p.dirty[file] = true
	}
	return n, nil
}

// breaksWhenNil reports whether s is if name == nil { break }.
func breaksWhenNil(s ast.Stmt, name string) bool {
	is, ok := s.(*ast.IfStmt)
	if !ok || is.Init != nil || is.Else != nil || len(is.Body.List) != 1 {
		return false
	}
	cond, ok := is.Cond.(*ast.BinaryExpr)
	if !ok || cond.Op != token.EQL || exprString(cond.X) != name || exprString(cond.Y) != "nil" {
		return false
	}
	br, ok := is.Body.List[0].(*ast.BranchStmt)
	return ok && br.Tok == token.BREAK && br.Label == nil
}

// assigns reports whether node assigns name anywhere.
func assigns(node ast.Node, name string) bool {
	found := false
	ast.Inspect(node, func(n ast.Node) bool {
		if as, ok := n.(*ast.AssignStmt); ok {
			for _, l := range as.Lhs {
				if exprString(l) == name {
					found = true
				}
			}
		}
		return !found
	})
	return found
}
