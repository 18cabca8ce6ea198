// An OpenTelemetry Collector of the core modules of one release, for tests/otlp_collector.rs:
// the OTLP receiver (gRPC and HTTP), the debug exporter, and `jsonfile`, a small exporter of
// this file that appends each batch of metrics it gets as one line of OTLP/JSON to a file, so
// a test can read names, units, kinds, attributes and the resource exactly as the Collector
// decoded them.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/confmap/provider/yamlprovider"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

func main() {
	settings := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "otelcol",
			Description: "OpenTelemetry Collector (core modules) for kube-prober's tests",
			Version:     "0.165.0",
		},
		Factories: factories,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{
					envprovider.NewFactory(),
					fileprovider.NewFactory(),
					yamlprovider.NewFactory(),
				},
				DefaultScheme: "env",
			},
		},
	}
	if err := otelcol.NewCommand(settings).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func factories() (otelcol.Factories, error) {
	receivers, err := otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory())
	if err != nil {
		return otelcol.Factories{}, err
	}
	exporters, err := otelcol.MakeFactoryMap[exporter.Factory](
		debugexporter.NewFactory(),
		newJSONFileFactory(),
	)
	if err != nil {
		return otelcol.Factories{}, err
	}
	return otelcol.Factories{
		Receivers: receivers,
		Exporters: exporters,
		Telemetry: otelconftelemetry.NewFactory(),
	}, nil
}

// jsonFileConfig is the `jsonfile` exporter's configuration: the file the batches go to.
type jsonFileConfig struct {
	Path string `mapstructure:"path"`
}

func (c *jsonFileConfig) Validate() error {
	if c.Path == "" {
		return errors.New("path must be set")
	}
	return nil
}

func newJSONFileFactory() exporter.Factory {
	return exporter.NewFactory(
		component.MustNewType("jsonfile"),
		func() component.Config { return &jsonFileConfig{} },
		exporter.WithMetrics(createJSONFile, component.StabilityLevelDevelopment),
	)
}

func createJSONFile(_ context.Context, _ exporter.Settings, cfg component.Config) (exporter.Metrics, error) {
	c, ok := cfg.(*jsonFileConfig)
	if !ok {
		return nil, fmt.Errorf("jsonfile: unexpected config type %T", cfg)
	}
	return &jsonFile{path: c.Path}, nil
}

// jsonFile writes every batch as one line (one write call) under a lock: a reader sees whole
// lines, or a last line without its newline that it leaves for later.
type jsonFile struct {
	path string
	mu   sync.Mutex
	file *os.File
}

func (j *jsonFile) Start(context.Context, component.Host) error {
	f, err := os.OpenFile(j.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	j.file = f
	return nil
}

func (j *jsonFile) Shutdown(context.Context) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.file == nil {
		return nil
	}
	err := j.file.Close()
	j.file = nil
	return err
}

func (j *jsonFile) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: false}
}

func (j *jsonFile) ConsumeMetrics(_ context.Context, md pmetric.Metrics) error {
	var m pmetric.JSONMarshaler
	line, err := m.MarshalMetrics(md)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.file == nil {
		return errors.New("jsonfile: not started")
	}
	_, err = j.file.Write(line)
	return err
}
