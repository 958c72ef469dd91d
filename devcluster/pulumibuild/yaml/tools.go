//go:build tools

// Package pulumibuild is the wrapper module scripts/build-pulumi.sh compiles the YAML language host from.
package pulumibuild

import _ "github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml"
