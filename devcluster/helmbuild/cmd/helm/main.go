// Command helm is upstream's helm command line (helm.sh/helm/v4/cmd/helm, Apache-2.0), built from the release the
// wrapper module's go.mod pins: scripts/build-helm.sh compiles it with -mod=readonly, so every module is the one
// go.sum names. Upstream's main, unchanged but for this comment: cmd/helm is a main package of the root module,
// which cannot be imported, so its few lines live here and call the public package helm.sh/helm/v4/pkg/cmd.
package main

import (
	"errors"
	"log/slog"
	"os"

	// Import to initialize client auth plugins.
	_ "k8s.io/client-go/plugin/pkg/client/auth"

	helmcmd "helm.sh/helm/v4/pkg/cmd"
	"helm.sh/helm/v4/pkg/kube"
)

func main() {
	// The name of the app in managedFields, as upstream sets it.
	kube.ManagedFieldsManager = "helm"

	cmd, err := helmcmd.NewRootCmd(os.Stdout, os.Args[1:], helmcmd.SetupLogging)
	if err != nil {
		slog.Warn("command failed", slog.Any("error", err))
		os.Exit(1)
	}

	if err := cmd.Execute(); err != nil {
		if cerr, ok := errors.AsType[helmcmd.CommandError](err); ok {
			os.Exit(cerr.ExitCode)
		}
		os.Exit(1)
	}
}
