// Parse an AsyncAPI document (path in argv[2]) with the official parser; print the verdict as JSON:
// validity, diagnostics, and every schema the parser found with the id it gave it
// (`<anonymous-schema-N>` unless the schema is a named component) and its title.
import { readFileSync } from "node:fs";
import { Parser } from "@asyncapi/parser";

const parser = new Parser();
const { document, diagnostics } = await parser.parse(readFileSync(process.argv[2], "utf8"));
const severities = ["error", "warning", "information", "hint"];
console.log(
  JSON.stringify({
    valid: document !== undefined,
    diagnostics: diagnostics.map((d) => ({
      severity: severities[d.severity],
      code: d.code,
      message: d.message,
      path: d.path.join("."),
    })),
    schemas: (document?.allSchemas().all() ?? []).map((s) => ({
      id: s.id(),
      title: s.title() ?? null,
      structured: s.properties() !== undefined || s.oneOf() !== undefined,
    })),
  }),
);
