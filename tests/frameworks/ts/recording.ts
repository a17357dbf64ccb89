// How the TypeScript drivers here export their spans: OTLP/HTTP protobuf to
// OTEL_EXPORTER_OTLP_ENDPOINT (the sidecar under test) in batches 50 ms apart, and, with
// RECORD_SPANS set to a path, every span also appended there as one OTLP/JSON export request
// per line (the recordings tests/frameworks replays). `also`: processors of the driver's own,
// run between the two. (Genkit's driver, in ts/genkit, has its own copy: Genkit pins
// OpenTelemetry JS 1.x, whose spans this module's 2.x serializer does not read.)
import { appendFileSync } from "node:fs";

import { type ExportResult, ExportResultCode } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { JsonTraceSerializer } from "@opentelemetry/otlp-transformer";
import {
  BatchSpanProcessor,
  type ReadableSpan,
  SimpleSpanProcessor,
  type SpanExporter,
  type SpanProcessor,
} from "@opentelemetry/sdk-trace-node";

class JsonLinesExporter implements SpanExporter {
  constructor(private readonly path: string) {}

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    const body = JsonTraceSerializer.serializeRequest(spans);
    if (body !== undefined) appendFileSync(this.path, Buffer.from(body).toString("utf8") + "\n");
    done({ code: ExportResultCode.SUCCESS });
  }

  async shutdown(): Promise<void> {}
}

export function spanProcessors(...also: SpanProcessor[]): SpanProcessor[] {
  const processors: SpanProcessor[] = [
    new BatchSpanProcessor(new OTLPTraceExporter(), { scheduledDelayMillis: 50 }),
    ...also,
  ];
  if (process.env.RECORD_SPANS) {
    processors.push(new SimpleSpanProcessor(new JsonLinesExporter(process.env.RECORD_SPANS)));
  }
  return processors;
}
