// Package buildinfo says which build of a command is running.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is what a command's --version prints: its name and the module
// version, the commit it was built from (with "(modified)" for
// uncommitted changes) and the Go version, as the build recorded them.
func Version(command string) string {
	version, commit, modified := "(devel)", "unknown", false
	goVersion := runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		goVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if modified {
		commit += " (modified)"
	}
	return fmt.Sprintf("%s %s\ncommit %s\n%s %s/%s\n", command, version, commit, goVersion, runtime.GOOS, runtime.GOARCH)
}
