// Command cert-manager-controller runs cert-manager's own controllers (github.com/cert-manager/cert-manager
// v1.21.2, package pkg/controller) for the Certificate, CertificateRequest and Issuer kinds with the
// SelfSigned and CA issuers, as a process with its own kubeconfig.
//
// Why this main and not upstream's: upstream's main lives in the nested module
// github.com/cert-manager/cert-manager/cmd/controller, which the module proxy does not serve (404), and its
// app package cannot be imported from here. The controllers, their registration and the context they run in
// are public packages of the root module; this file does what upstream's app.Run does for the controllers
// named below: one ContextFactory, each registered constructor, then the shared informers, then Run.
// ACME, Vault, Venafi, the ingress/gateway shims and CertificateSigningRequests are left out: they need
// network access, pods or Kubernetes' CSR signer, none of which opbroker's certificates plan uses.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"k8s.io/klog/v2"

	// Each import registers its controller (or issuer) with controllerpkg.Register in init().
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// controllers are the ones this binary runs, by their registered names (all of them are registered above).
var controllers = []string{
	"issuers",
	"certificaterequests-approver",
	"certificaterequests-issuer-ca",
	"certificaterequests-issuer-selfsigned",
	"certificates-trigger",
	"certificates-issuing",
	"certificates-key-manager",
	"certificates-request-manager",
	"certificates-readiness",
	"certificates-revision-manager",
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the identity the controllers act as (required)")
	namespace := flag.String("namespace", "", "watch only this namespace (empty: all namespaces)")
	clusterResourceNamespace := flag.String("cluster-resource-namespace", "cert-manager",
		"namespace of the Secrets ClusterIssuers refer to")
	workers := flag.Int("workers", 2, "workers per controller")
	ownerRef := flag.Bool("enable-certificate-owner-ref", true,
		"make each Certificate the owner of its Secret, so deleting the Certificate deletes the Secret "+
			"(upstream's flag, default false there; true here: a deprovisioned instance leaves no key behind)")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "cert-manager-controller: --kubeconfig is required")
		os.Exit(2)
	}
	if err := run(*kubeconfig, *namespace, *clusterResourceNamespace, *workers, *ownerRef); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager-controller:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace, clusterResourceNamespace string, workers int, ownerRef bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log.WithName("cert-manager-controller"))

	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         kubeconfig,
		Namespace:          namespace,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions: controllerpkg.IssuerOptions{
			ClusterResourceNamespace: clusterResourceNamespace,
		},
		CertificateOptions: controllerpkg.CertificateOptions{
			EnableOwnerRef: ownerRef,
			// Upstream's defaults (cmd/controller/app/options): a failed request is retried after 1 h, then
			// with exponential backoff up to 32 h.
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}
	known := controllerpkg.Known()
	built := make(map[string]controllerpkg.Interface, len(controllers))
	for _, name := range controllers {
		constructor, ok := known[name]
		if !ok {
			names := make([]string, 0, len(known))
			for n := range known {
				names = append(names, n)
			}
			sort.Strings(names)
			return fmt.Errorf("controller %q is not registered (registered: %s)", name, strings.Join(names, ", "))
		}
		c, err := constructor(factory)
		if err != nil {
			return fmt.Errorf("building controller %q: %w", name, err)
		}
		built[name] = c
	}
	// The informer factories are shared by every Context the factory builds; start them after every
	// controller has asked for its informers (as upstream does).
	shared, err := factory.Build()
	if err != nil {
		return err
	}
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())

	var wg sync.WaitGroup
	errs := make(chan error, len(built))
	for name, c := range built {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(workers, ctx); err != nil {
				errs <- fmt.Errorf("controller %q: %w", name, err)
				stop()
			}
		}()
	}
	fmt.Fprintf(os.Stderr, "cert-manager-controller: running %d controllers\n", len(built))
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	return nil
}
