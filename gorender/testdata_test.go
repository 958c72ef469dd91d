package main

// Test fixtures read from the repository: the seed's Zalando plan, the render inputs of the example catalog
// and the tiny chart of tests/data/charts, packed into an archive in memory.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

const repo = ".."

func readYAML(t testing.TB, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, path))
	if err != nil {
		t.Fatal(err)
	}
	asJSON, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	var req Request
	if err := decodeRequest([]byte(`{"values":`+string(asJSON)+`}`), &req); err != nil {
		t.Fatal(err)
	}
	return req.Values
}

// zalandoTemplate is the text of one action's template in the seed's plan.
func zalandoTemplate(t testing.TB, action string) string {
	t.Helper()
	plan := readYAML(t, "tests/data/seeds/sfplan-postgresql-zalando.yaml")
	for _, raw := range plan["spec"].(map[string]any)["templates"].([]any) {
		tmpl := raw.(map[string]any)
		if tmpl["action"] == action {
			return tmpl["content"].(string)
		}
	}
	t.Fatalf("no %s template", action)
	return ""
}

// zalandoValues are the variables Service Fabrik passes: plan, instance, binding and the live sources.
func zalandoValues(t testing.TB, withBinding bool) map[string]any {
	t.Helper()
	values := map[string]any{
		"plan":       readYAML(t, "tests/data/seeds/sfplan-postgresql-zalando.yaml"),
		"service":    readYAML(t, "tests/data/seeds/sfservice-postgresql.yaml"),
		"instance":   readYAML(t, "examples/catalog/render-inputs/instance.yaml"),
		"postgresql": readYAML(t, "examples/catalog/render-inputs/sources/postgresql.yaml"),
	}
	if withBinding {
		values["binding"] = readYAML(t, "examples/catalog/render-inputs/binding.yaml")
		values["secret"] = readYAML(t, "examples/catalog/render-inputs/sources/secret.yaml")
		values["svc"] = readYAML(t, "examples/catalog/render-inputs/sources/svc.yaml")
	}
	return values
}

// tinyChart packs tests/data/charts/tiny as helm packages it (a tiny/ top folder in a .tgz).
func tinyChart(t testing.TB) []byte {
	t.Helper()
	root := filepath.Join(repo, "tests", "data", "charts", "tiny")
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if err := tw.WriteHeader(&tar.Header{Name: "tiny/" + filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
