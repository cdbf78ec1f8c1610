"""verifiers: an environment whose rubric is kerneljudge (set KERNELJUDGE_URL and KERNELJUDGE_API_KEY)."""
from kerneljudge.adapters.verifiers import kerneljudge_reward

# The dataset's "answer" column holds the reference source or problem id; service errors score 0.0.
kernel_reward = kerneljudge_reward(options={"reward_preset": "log_speedup"}, timeout_s=900)


def load_environment(dataset):
    import verifiers as vf

    return vf.SingleTurnEnv(dataset=dataset, rubric=vf.Rubric(funcs=[kernel_reward], weights=[1.0]))
