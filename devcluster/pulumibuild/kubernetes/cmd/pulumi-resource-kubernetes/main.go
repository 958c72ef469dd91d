// The Kubernetes resource plugin's main (upstream's is the same call): serve the provider with the schema
// and Terraform mapping that build-pulumi.sh writes next to this file from the provider module's JSON.
package main

import (
	_ "embed"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema-embed.json
var schema []byte

//go:embed terraform-mapping-embed.json
var terraformMapping []byte

func main() { provider.Serve("kubernetes", version.Version, schema, terraformMapping) }
