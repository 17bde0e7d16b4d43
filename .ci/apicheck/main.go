// Command apicheck prints the exported API of the Go packages in the
// directories it is given, one declaration a line, without comments or
// bodies, so that CI can compare it with a committed golden file
// (.ci/api.txt) and fail on an unintended change. It also fails when an
// exported declaration names a package under internal/, or when a package
// exports a variable other than an error sentinel (ErrXxx).
//
//	go run ./.ci/apicheck DIR...
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	var lines, problems []string
	for _, dir := range os.Args[1:] {
		l, p := pkgAPI(dir)
		lines = append(lines, l...)
		problems = append(problems, p...)
	}
	for _, l := range lines {
		fmt.Println(l)
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "apicheck:", p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}

func pkgAPI(dir string) (lines, problems []string) {
	fset := token.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	internal := map[string]bool{} // import names of internal packages, per file
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		clear(internal)
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if strings.Contains(path, "/internal/") {
				n := filepath.Base(path)
				if imp.Name != nil {
					n = imp.Name.Name
				}
				internal[n] = true
			}
		}
		prefix := dir + ": "
		for _, d := range f.Decls {
			for _, l := range declAPI(fset, d) {
				lines = append(lines, prefix+l)
				for n := range internal {
					if strings.Contains(l, n+".") {
						problems = append(problems, fmt.Sprintf("%s%s names internal package %s", prefix, l, n))
					}
				}
				if strings.HasPrefix(l, "var ") && !strings.HasPrefix(l, "var Err") {
					problems = append(problems, fmt.Sprintf("%s%s: an exported variable other than an error sentinel can be changed by anyone", prefix, l))
				}
			}
		}
	}
	sort.Strings(lines)
	return lines, problems
}

func declAPI(fset *token.FileSet, d ast.Decl) []string {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
			return nil
		}
		d.Body, d.Doc = nil, nil
		return []string{src(fset, d)}
	case *ast.GenDecl:
		var out []string
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if !s.Name.IsExported() {
					continue
				}
				s.Doc, s.Comment = nil, nil
				if st, ok := s.Type.(*ast.StructType); ok {
					st.Fields.List = exportedFields(st.Fields.List)
				}
				if it, ok := s.Type.(*ast.InterfaceType); ok {
					it.Methods.List = exportedFields(it.Methods.List)
				}
				out = append(out, "type "+src(fset, s))
			case *ast.ValueSpec:
				for i, n := range s.Names {
					if !n.IsExported() {
						continue
					}
					l := d.Tok.String() + " " + n.Name
					if s.Type != nil {
						l += " " + src(fset, s.Type)
					}
					if d.Tok == token.CONST && i < len(s.Values) {
						l += " = " + src(fset, s.Values[i])
					}
					out = append(out, l)
				}
			}
		}
		return out
	}
	return nil
}

func exportedRecv(r *ast.FieldList) bool {
	t := r.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if ix, ok := t.(*ast.IndexExpr); ok {
		t = ix.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.IsExported()
}

func exportedFields(fs []*ast.Field) []*ast.Field {
	var out []*ast.Field
	for _, f := range fs {
		f.Doc, f.Comment = nil, nil
		if len(f.Names) == 0 { // embedded
			out = append(out, f)
			continue
		}
		var names []*ast.Ident
		for _, n := range f.Names {
			if n.IsExported() {
				names = append(names, n)
			}
		}
		if len(names) > 0 {
			f.Names = names
			out = append(out, f)
		}
	}
	return out
}

func src(fset *token.FileSet, n any) string {
	var b bytes.Buffer
	if err := format.Node(&b, token.NewFileSet(), n); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}
