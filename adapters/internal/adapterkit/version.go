package adapterkit

import "runtime/debug"

// Version returns the version of module path linked into the program, as the
// build info records it, or "(unknown)"; a replaced module is named with its
// replacement ("v0.9.4 replaced by ../fork"). Probe errors name the upstream
// library's version with it.
func Version(path string) string {
	bi, ok := debug.ReadBuildInfo()
	return moduleVersion(bi, ok, path)
}

// moduleVersion returns the version of module path in bi, with its
// replacement when it is replaced, or "(unknown)". Test binaries carry no
// dependencies in their build info.
func moduleVersion(bi *debug.BuildInfo, ok bool, path string) string {
	if !ok || bi == nil {
		return "(unknown)"
	}
	mods := append([]*debug.Module{&bi.Main}, bi.Deps...)
	for _, m := range mods {
		if m == nil || m.Path != path {
			continue
		}
		v := m.Version
		if v == "" {
			v = "(unknown)"
		}
		if r := m.Replace; r != nil {
			v += " replaced by " + r.Path
			if r.Version != "" && r.Version != "(devel)" {
				v += " " + r.Version
			}
		}
		return v
	}
	return "(unknown)"
}
