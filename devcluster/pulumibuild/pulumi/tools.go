//go:build tools

// Package pulumibuild is the wrapper module scripts/build-pulumi.sh compiles the pulumi CLI from.
package pulumibuild

import _ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
