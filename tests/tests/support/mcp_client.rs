//! A real MCP client (the official SDK's) that spawns `wakterm mcp` for a test world and calls
//! its tools over stdio.
#![allow(dead_code)]

use super::World;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use rmcp::transport::TokioChildProcess;
use serde_json::Value;

pub type Client = RunningService<RoleClient, ()>;

/// Spawns `wakterm mcp` for `w` and performs the MCP handshake (initialize).
pub async fn connect(w: &World) -> Client {
    let command = tokio::process::Command::from(w.cmd(&["mcp"]));
    let transport = TokioChildProcess::new(command).expect("spawn wakterm mcp");
    ().serve(transport).await.expect("the MCP handshake (initialize)")
}

/// Calls a tool; returns (is_error, structured content).
pub async fn call(client: &Client, tool: &str, arguments: Value) -> (bool, Value) {
    let arguments = arguments.as_object().cloned().expect("arguments are an object");
    let result: CallToolResult = client.call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(arguments)).await.expect("the call is answered");
    (result.is_error == Some(true), result.structured_content.expect("every tool answers structured content"))
}

/// Calls a tool; returns (is_error, structured content, the exit code in `_meta`).
pub async fn call_with_exit(client: &Client, tool: &str, arguments: Value) -> (bool, Value, Option<i64>) {
    let arguments = arguments.as_object().cloned().expect("arguments are an object");
    let result: CallToolResult = client.call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(arguments)).await.expect("the call is answered");
    let exit_code = result.meta.as_ref().and_then(|m| m.0.get("wakterm/exit_code")).and_then(Value::as_i64);
    (result.is_error == Some(true), result.structured_content.expect("every tool answers structured content"), exit_code)
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}
