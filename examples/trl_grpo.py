"""TRL GRPO with kerneljudge as the reward (set KERNELJUDGE_URL and KERNELJUDGE_API_KEY)."""
from kerneljudge.adapters.trl import kerneljudge_reward

# Dataset columns: "prompt" and "reference" (source) or "problem_id"; service errors score 0.0.
reward_fn = kerneljudge_reward(options={"reward_preset": "default"}, timeout_s=900)

if __name__ == "__main__":
    from datasets import load_dataset
    from trl import GRPOConfig, GRPOTrainer

    dataset = load_dataset("json", data_files="kernel_prompts.jsonl", split="train")
    GRPOTrainer(model="Qwen/Qwen2.5-Coder-7B-Instruct", reward_funcs=[reward_fn],
                args=GRPOConfig(output_dir="grpo-kernels"), train_dataset=dataset).train()
