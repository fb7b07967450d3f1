// A module worker answering requests: each request is { id, type, ... }, answered by { id, ok: true, ... } or
// { id, ok: false, error }, with any number of events (messages { id, ... } without `ok`: progress, tokens)
// before the answer. Shared by the CPU pool (cpu-pool.js), the onnxruntime-web peer (ort-peer.js) and the
// model sections (models.js).

export class WorkerClient {
  /** Starts the module worker at `url`; `label` names it in errors ("CPU worker failed: ..."). */
  constructor(url, label) {
    this.label = label;
    this.nextId = 1;
    this.pending = new Map();
    this.failure = null;
    this.worker = new Worker(url, { type: "module" });
    this.worker.onmessage = (e) => {
      const { id, ok, error } = e.data;
      const p = this.pending.get(id);
      if (!p) return;
      if (ok === undefined) return p.onEvent?.(e.data);
      this.pending.delete(id);
      ok ? p.resolve(e.data) : p.reject(new Error(error));
    };
    this.worker.onerror = (e) => {
      this.failure = new Error(`${label} failed: ${e.message || "could not start"}`);
      this.rejectAll(this.failure);
    };
  }

  /** Sends `msg` ({ type, ... }); resolves to the answer, calling `onEvent` with each event message. */
  call(msg, onEvent, transfer = []) {
    return new Promise((resolve, reject) => {
      if (this.failure) return reject(this.failure);
      const id = this.nextId++;
      this.pending.set(id, { resolve, reject, onEvent });
      this.worker.postMessage({ id, ...msg }, transfer);
    });
  }

  /** Sends `msg` without an id: a notice that gets no answer (e.g. { type: "stop" } while a request runs). */
  post(msg) {
    this.worker.postMessage(msg);
  }

  /** Terminates the worker at once: every request in flight rejects with "stopped". */
  terminate() {
    this.worker.terminate();
    this.rejectAll(new Error("stopped"));
  }

  rejectAll(err) {
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
  }
}

/** An `onEvent` for WorkerClient.call that passes only progress events' text to `onProgress` (if given). */
export const progressEvents = (onProgress) => (m) => {
  if (m.progress !== undefined) onProgress?.(m.progress);
};
