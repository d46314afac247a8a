from . import CONFIG_DIR

print(CONFIG_DIR)
