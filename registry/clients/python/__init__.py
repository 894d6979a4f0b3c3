"""Python clients, one package per tool and profile."""
