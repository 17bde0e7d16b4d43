package adapterkit

import "runtime/debug"

// Version returns the version of module path linked into the program, as the
// build info records it (its replacement's when it is replaced), or
// "(unknown)". Probe errors name the upstream library's version with it.
func Version(path string) string {
	bi, ok := debug.ReadBuildInfo()
	return moduleVersion(bi, ok, path)
}

// moduleVersion returns the version of module path in bi (its replacement's
// when it is replaced), or "(unknown)". Test binaries carry no dependencies
// in their build info.
func moduleVersion(bi *debug.BuildInfo, ok bool, path string) string {
	if !ok || bi == nil {
		return "(unknown)"
	}
	mods := append([]*debug.Module{&bi.Main}, bi.Deps...)
	for _, m := range mods {
		if m == nil || m.Path != path {
			continue
		}
		if m.Replace != nil && m.Replace.Version != "" {
			return m.Replace.Version
		}
		if m.Version != "" {
			return m.Version
		}
	}
	return "(unknown)"
}
