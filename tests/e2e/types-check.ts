// Type-checks the generated pkg/webtensor.d.ts the way a TypeScript user would use it (never run:
// `npm run typecheck` only compiles it). Build pkg/ first with scripts/build-wasm.sh.
import init, { Device, DeviceInfo, Graph, Plan, Tensor, matmul, type BackendName, type PlanInputs } from "../../pkg/webtensor.js";

export async function example(): Promise<number[]> {
  await init();
  const backend: BackendName = "auto";
  const dev: Device = await Device.create(backend);
  const kind: "webgpu" | "cpu" = dev.backend;
  const info: DeviceInfo = dev.info();
  const limit: number = info.maxStorageBindingBytes + info.maxWorkgroupStorageBytes;
  const name: string = dev.adapterName + kind + info.dtypes.join(",") + String(info.shaderF16);

  const g = new Graph();
  const a: Tensor = g.input("a", [4, 2]);
  const b: Tensor = g.input("b", new Uint32Array([3, 2]));
  const c = g.matmul(b, g.t(a));
  const x = g.softmaxExt(g.gelu(g.add(c, c)), undefined, 0.5);
  const y = g.layerNorm(g.rmsNorm(g.relu(x), 1e-6), 1e-5);
  const z = g.concat([y, g.silu(y)], -1);
  const shape: number[] = g.shape(z);
  const plan: Plan = await dev.compile(g, [c, z]);
  const names: string[] = plan.inputNames;
  const inputs: PlanInputs = { a: new Float32Array(8), b: new Float32Array(6) };
  const outs: Float32Array[] = await plan.run(inputs);
  const outs2: Float32Array[] = await plan.run([new Float32Array(8), new Float32Array(6)]);
  const stats = plan.stats();
  const prod: Float32Array = await matmul(new Float32Array(6), new Float32Array(6), 2, 3, 2, "cpu");
  const prod2: Float32Array = await matmul(new Float32Array(6), new Float32Array(6), 2, 3, 2);
  plan.free();
  g.free();
  return [limit, name.length, shape.length, names.length, outs.length, outs2.length, stats.dispatches, prod[0], prod2[0]];
}
