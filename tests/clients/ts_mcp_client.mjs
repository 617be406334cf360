// A test driver for the official MCP TypeScript client SDK (@modelcontextprotocol/client 2.x).
//
//     ts-mcp-client [PLAN.json | -]        (the launcher from scripts/install-ts-client.sh)
//     ts-mcp-client --version
//
// Reads a JSON plan (from the file given, or stdin), connects one SDK `Client` pinned to protocol
// revision 2026-07-28 over Streamable HTTP, runs the plan's steps in order and prints ONE JSON
// document on stdout:
//
//     {"protocolVersion": "2026-07-28", "era": "modern", "serverInfo": {...},
//      "connect": {"ok": true} | {"ok": false, "error": {...}},
//      "steps": [{"op", "ok": true, "result": {...}} | {"op", "ok": false, "error": {...}}, ...],
//      "asked": [{"method": "elicitation/create", "key": ..., "params": {...}}, ...],
//      "http": [{"rpcMethod": ..., "id": ..., "status": ..., "headers": {...}}, ...],
//      "transportErrors": [...]}
//
// `asked` lists, in order, every input request the SDK handed to this client's handlers (the
// SDK fulfils `input_required` results itself, through the handlers registered with
// `client.setRequestHandler`); `http` lists every HTTP request the transport sent. An error is
// `{"code", "message", "data"}`: a JSON-RPC error has a numeric code; an SDK-local error has the
// SDK's string code (e.g. "INPUT_REQUIRED_ROUNDS_EXCEEDED") and `"sdk": true`.
//
// Plan:
//   url             the MCP endpoint (required)
//   headers         extra HTTP headers for every request
//   capabilities    the client capabilities to declare, e.g. {"elicitation": {"form": {}}};
//                   a handler is registered only for what is declared
//   clientInfo      {"name", "version"}
//   protocolVersion the revision to pin (default "2026-07-28")
//   answers         {"elicitation": [ElicitResult, ...]   a queue; empty -> {"action": "decline"}
//                    "sampling": [CreateMessageResult, ...] a queue; empty -> the handler fails
//                    "roots": [Root, ...]}                  the roots/list answer, every time
//   askedFile       a file each input request is also appended to, as one JSON line, when the
//                   SDK hands it over (a test acts on it while the plan runs: opens a URL)
//   maxRounds       inputRequired.maxRounds (SDK default 10)
//   autoFulfill     inputRequired.autoFulfill (SDK default true)
//   requestTimeoutMs  per request (default 10000)
//   timeoutMs       the whole run; past it the driver exits 3 (default 30000)
//   steps           [{"op": "listTools" | "listPrompts" | "listResources" |
//                           "listResourceTemplates"},
//                    {"op": "callTool", "name", "arguments"},
//                    {"op": "getPrompt", "name", "arguments"},
//                    {"op": "readResource", "uri"},
//                    {"op": "rawRequest", "method", "params", "allowInputRequired"},
//                    {"op": "retryTampered", "method" (default tools/call), "params"}]
//                  any step may add "progress": true: the request then carries a progressToken
//                  and the step reports the progress notifications it got (`progress`)
//
// `rawRequest` is manual mode: with allowInputRequired the raw InputRequiredResult comes back.
// `retryTampered` runs round 1 manually, answers its input requests with the plan's answers,
// flips one character in the middle of the requestState and sends the retry; its result (or
// error) is the step's, with `round1` (the first answer) and `sentState` alongside.
//
// Exit status: 0 when the plan ran (whatever the steps did), 2 for a bad plan or usage,
// 3 when the run overran its time limit, 1 when the driver itself failed.

import { appendFileSync, readFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';

const EXIT_BAD_PLAN = 2;
const EXIT_TIMEOUT = 3;
const DEFAULT_REVISION = '2026-07-28';
const NO_CACHE = { cacheMode: 'bypass' }; // every read goes to the server, none to the SDK's cache

// The launcher names the SDK's ES module entry by its file path (an older launcher, by a file: URL).
const sdkSetting = process.env.MCP_TS_CLIENT_SDK || '@modelcontextprotocol/client';
const sdkEntry = sdkSetting.startsWith('/') ? pathToFileURL(sdkSetting).href : sdkSetting;
const sdk = await import(sdkEntry);
const { Client, StreamableHTTPClientTransport, ProtocolError, SdkError } = sdk;

function sdkVersion() {
    try {
        const pkg = new URL('../package.json', import.meta.resolve(sdkEntry));
        return JSON.parse(readFileSync(pkg, 'utf8')).version;
    } catch {
        return null;
    }
}

function fail(code, message) {
    process.stderr.write(`ts-mcp-client: ${message}\n`);
    process.exit(code);
}

function readPlan(argv) {
    const source = argv[0] === undefined || argv[0] === '-' ? 0 : argv[0]; // 0: stdin
    let text;
    try {
        text = readFileSync(source, 'utf8');
    } catch (error) {
        fail(EXIT_BAD_PLAN, `cannot read the plan: ${error.message}`);
    }
    let plan;
    try {
        plan = JSON.parse(text);
    } catch (error) {
        fail(EXIT_BAD_PLAN, `the plan is not JSON: ${error.message}`);
    }
    if (plan === null || typeof plan !== 'object' || typeof plan.url !== 'string') {
        fail(EXIT_BAD_PLAN, 'the plan must be an object with a "url"');
    }
    if (plan.steps !== undefined && !Array.isArray(plan.steps)) {
        fail(EXIT_BAD_PLAN, '"steps" must be a list');
    }
    return plan;
}

/** A JSON-safe copy (drops functions, cycles, bigints become strings). */
function plain(value) {
    if (value === undefined) return null;
    const seen = new WeakSet();
    return JSON.parse(
        JSON.stringify(value, (_key, v) => {
            if (typeof v === 'bigint') return v.toString();
            if (typeof v === 'object' && v !== null) {
                if (seen.has(v)) return '[circular]';
                seen.add(v);
            }
            return v;
        }) ?? 'null'
    );
}

function describeError(error) {
    let described;
    if (error instanceof ProtocolError) {
        described = { code: error.code, message: error.message, data: plain(error.data) };
    } else if (error instanceof SdkError) {
        described = { code: error.code, message: error.message, data: plain(error.data) };
        described.sdk = true;
    } else if (error instanceof Error) {
        described = { code: null, message: `${error.name}: ${error.message}`, data: null };
    } else {
        return { code: null, message: String(error), data: null };
    }
    // The chain of causes, e.g. "TypeError: fetch failed <- Error: connect ECONNREFUSED ...".
    const causes = [];
    let cause = error.cause;
    while (cause instanceof Error && causes.length < 4) {
        causes.push(`${cause.name}: ${cause.message}`);
        cause = cause.cause;
    }
    if (causes.length > 0) described.cause = causes.join(' <- ');
    return described;
}

/** A fetch that records what the transport sends (method, id, MCP headers) and the status. */
function recordingFetch(log) {
    return async (url, init = {}) => {
        const entry = { httpMethod: init.method ?? 'GET' };
        if (typeof init.body === 'string') {
            try {
                const body = JSON.parse(init.body);
                entry.rpcMethod = body.method ?? null;
                entry.id = body.id ?? null;
            } catch {
                entry.rpcMethod = null;
            }
        }
        const headers = new Headers(init.headers);
        entry.headers = {};
        for (const [name, value] of headers) {
            if (name.startsWith('mcp-') || name === 'accept') entry.headers[name] = value;
        }
        log.push(entry);
        const response = await fetch(url, init);
        entry.status = response.status;
        entry.contentType = response.headers.get('content-type');
        return response;
    };
}

function flipMiddle(text) {
    const i = Math.floor(text.length / 2);
    return text.slice(0, i) + (text[i] === 'A' ? 'B' : 'A') + text.slice(i + 1);
}

async function main() {
    const argv = process.argv.slice(2);
    if (argv[0] === '--version') {
        const driver = fileURLToPath(import.meta.url);
        process.stdout.write(JSON.stringify({ sdk: sdkVersion(), node: process.version, driver }) + '\n');
        return 0;
    }
    const plan = readPlan(argv);
    const timeoutMs = Number(plan.timeoutMs ?? 30_000);
    const watchdog = setTimeout(
        () => fail(EXIT_TIMEOUT, `the plan did not finish within ${timeoutMs} ms`),
        timeoutMs
    );

    const requestOptions = { timeout: Number(plan.requestTimeoutMs ?? 10_000) };
    const capabilities = plan.capabilities ?? {};
    const answers = plan.answers ?? {};
    const elicitationQueue = [...(answers.elicitation ?? [])];
    const samplingQueue = [...(answers.sampling ?? [])];
    const roots = answers.roots ?? [];
    const asked = [];
    const http = [];
    const transportErrors = [];

    const inputRequired = {};
    if (plan.maxRounds !== undefined) inputRequired.maxRounds = plan.maxRounds;
    if (plan.autoFulfill !== undefined) inputRequired.autoFulfill = plan.autoFulfill;

    const client = new Client(plan.clientInfo ?? { name: 'mcp-edge-ts-client', version: '0.0.0' }, {
        capabilities,
        versionNegotiation: { mode: { pin: plan.protocolVersion ?? DEFAULT_REVISION } },
        inputRequired
    });
    client.onerror = error => transportErrors.push(describeError(error));

    // The answers, shared by the SDK's auto-fulfilment (through the handlers) and by the manual
    // retryTampered step.
    const answer = {
        'elicitation/create': () => elicitationQueue.shift() ?? { action: 'decline' },
        'sampling/createMessage': () => {
            const next = samplingQueue.shift();
            if (next === undefined) throw new Error('the plan has no sampling answer left');
            return next;
        },
        'roots/list': () => ({ roots })
    };
    const declared = {
        'elicitation/create': capabilities.elicitation !== undefined,
        'sampling/createMessage': capabilities.sampling !== undefined,
        'roots/list': capabilities.roots !== undefined
    };
    for (const [method, respond] of Object.entries(answer)) {
        if (!declared[method]) continue; // the SDK refuses handlers for undeclared capabilities
        client.setRequestHandler(method, async (request, ctx) => {
            const entry = { method, key: ctx?.mcpReq?.id ?? null, params: plain(request.params) };
            asked.push(entry);
            if (plan.askedFile) appendFileSync(plan.askedFile, JSON.stringify(entry) + '\n');
            return respond();
        });
    }

    const transport = new StreamableHTTPClientTransport(new URL(plan.url), {
        requestInit: { headers: plan.headers ?? {} },
        fetch: recordingFetch(http)
    });

    const report = { protocolVersion: null, era: null, serverInfo: null, steps: [] };
    Object.assign(report, { asked, http, transportErrors });
    try {
        await client.connect(transport, requestOptions);
        report.connect = { ok: true };
    } catch (error) {
        report.connect = { ok: false, error: describeError(error) };
    }
    report.protocolVersion = client.getNegotiatedProtocolVersion() ?? null;
    report.era = client.getProtocolEra() ?? null;
    report.serverInfo = plain(client.getServerVersion());

    if (report.connect.ok) {
        for (const step of plan.steps ?? []) {
            report.steps.push(await runStep(client, step, requestOptions, answer, asked));
        }
    }
    try {
        await client.close();
    } catch (error) {
        transportErrors.push(describeError(error));
    }
    clearTimeout(watchdog);
    await new Promise(resolve => process.stdout.write(JSON.stringify(report) + '\n', resolve));
    return 0;
}

async function runStep(client, step, baseOptions, answer, asked) {
    const op = step?.op;
    const progress = [];
    if (!step?.progress) return await runOp(client, op, step, baseOptions, answer, asked);
    const options = { ...baseOptions, onprogress: p => progress.push(plain(p)) };
    return { ...(await runOp(client, op, step, options, answer, asked)), progress };
}

async function runOp(client, op, step, options, answer, asked) {
    try {
        switch (op) {
            case 'listTools':
                return ok(op, await client.listTools(undefined, options));
            case 'listPrompts':
                return ok(op, await client.listPrompts(undefined, options));
            case 'listResources':
                return ok(op, await client.listResources(undefined, options));
            case 'listResourceTemplates':
                return ok(op, await client.listResourceTemplates(undefined, options));
            case 'callTool':
                return ok(op, await client.callTool(named(step), options));
            case 'getPrompt':
                return ok(op, await client.getPrompt(named(step), options));
            case 'readResource':
                return ok(op, await client.readResource({ uri: step.uri }, { ...options, ...NO_CACHE }));
            case 'rawRequest':
                return ok(
                    op,
                    await client.request(
                        { method: step.method, params: step.params ?? {} },
                        { ...options, allowInputRequired: Boolean(step.allowInputRequired) }
                    )
                );
            case 'retryTampered':
                return await retryTampered(client, step, options, answer, asked);
            default:
                return { op: op ?? null, ok: false, error: localError(`unknown op: ${op}`) };
        }
    } catch (error) {
        return { op, ok: false, error: describeError(error) };
    }
}

function ok(op, result) {
    return { op, ok: true, result: plain(result) };
}

function named(step) {
    return { name: step.name, arguments: step.arguments ?? {} };
}

function localError(message) {
    return { code: null, message, data: null };
}

async function retryTampered(client, step, options, answer, asked) {
    const op = 'retryTampered';
    const method = step.method ?? 'tools/call';
    const params = step.params ?? {};
    const manual = { ...options, allowInputRequired: true };
    const round1 = plain(await client.request({ method, params }, manual));
    if (round1?.resultType !== 'input_required' || typeof round1.requestState !== 'string') {
        const error = localError('round 1 did not return input_required with a requestState');
        return { op, ok: false, error, round1 };
    }
    const inputResponses = {};
    for (const [key, request] of Object.entries(round1.inputRequests ?? {})) {
        const respond = answer[request.method];
        if (respond === undefined) continue;
        asked.push({ method: request.method, key, params: plain(request.params) });
        inputResponses[key] = respond();
    }
    const sentState = flipMiddle(round1.requestState);
    try {
        const retry = { ...params, inputResponses, requestState: sentState };
        const result = await client.request({ method, params: retry }, manual);
        return { op, ok: true, result: plain(result), round1, sentState };
    } catch (error) {
        return { op, ok: false, error: describeError(error), round1, sentState };
    }
}

try {
    process.exitCode = await main();
} catch (error) {
    process.stderr.write(`ts-mcp-client: driver failure: ${error?.stack ?? error}\n`);
    process.exit(1);
}
// Nothing may keep the process alive once the report is out (sockets in a keep-alive pool,
// a reconnect timer of the SDK): leave now.
process.exit(process.exitCode ?? 0);
