package platform

import "strings"

// Execution-environment properties.
//
// Most properties are labels: they say which machines may run an action
// (OSFamily, pool, a team's label), and a worker that accepts unmatched
// properties (Worker.AllowUnmatched) may take an action with a label it
// does not declare. Some properties instead ask the worker to run the
// command in an environment it would have to build: a container image
// (container-image, as Bazel, BuildStream and RBE spell it) or a Docker
// setting (dockerPrivileged, dockerRuntime, dockerUser...). Gantry's
// workers build none of these; a worker that took such an action anyway
// would run it on its host and return a result that claims an image it
// did not use. So AllowUnmatched never covers them: only a worker that
// declares the property (its host or sandbox is that environment, and the
// operator says so) takes the action, unless the operator lists the
// property in IgnoredPropertiesKey, which drops it before matching.
//
// The Docker settings Gantry's sandbox does honour (dockerNetwork, see
// IsSpecial) are requests to the worker, not environments.

// ContainerImage asks for the image the command must run in.
const ContainerImage = "container-image"

// IgnoredPropertiesKey is the configuration key listing the property
// names the scheduler drops from every action before matching; the
// analysis names it as the way to run such actions anyway.
const IgnoredPropertiesKey = "scheduler.ignored_properties"

// dockerPrefix starts the names of RBE's Docker settings.
const dockerPrefix = "docker"

// IsEnvironment reports whether a property asks for an execution
// environment, which only a worker that declares it can provide.
func IsEnvironment(name string) bool {
	if name == ContainerImage {
		return true
	}
	return strings.HasPrefix(name, dockerPrefix) && !IsSpecial(name)
}

// Without returns ps without the properties named in drop (ps itself when
// it has none of them).
func (ps Properties) Without(drop []string) Properties {
	if len(drop) == 0 {
		return ps
	}
	keep := func(p Property) bool {
		for _, d := range drop {
			if p.Name == d {
				return false
			}
		}
		return true
	}
	n := 0
	for _, p := range ps {
		if keep(p) {
			n++
		}
	}
	if n == len(ps) {
		return ps
	}
	out := make(Properties, 0, n)
	for _, p := range ps {
		if keep(p) {
			out = append(out, p)
		}
	}
	return out
}
